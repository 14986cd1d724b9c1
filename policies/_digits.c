/*
 * policies._digits: has_digit_run(value, n), count_members(value) and count_keys(document),
 * in C.
 *
 * The JSON rules of policies/records.py decode a record value with orjson only when it holds
 * no run of 19 ASCII digits (an integer orjson would turn into a float); the Python way of
 * asking (translate every byte, then search) cost a quarter of a JSON Schema check. Same
 * answer as policies.records._has_digit_run_python, which is used when this is not built.
 *
 * They refuse a JSON object that gives a key twice (readers keep the first, the last, or
 * refuse it): count_members(value) counts the members the text writes, count_keys(document)
 * the keys its decoded dicts hold; the two differ exactly when a key is given twice. Without
 * this module, policies.records decodes the text again to ask (slower, same answer).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

PyDoc_STRVAR(has_digit_run_doc,
"has_digit_run(value, n, /)\n"
"--\n\n"
"Whether the bytes-like value holds n ASCII digits in a row (n >= 1).");

static PyObject *
has_digit_run(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t wanted;
    if (!PyArg_ParseTuple(args, "y*n:has_digit_run", &view, &wanted)) {
        return NULL;
    }
    if (wanted < 1) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "n must be at least 1");
        return NULL;
    }
    /* Look at the last byte of each window of `wanted` bytes first: a non-digit there rules
     * out every run that starts in the window, so text with short numbers is read about one
     * byte in `wanted`. bytes[start:known] are digits already seen, never read twice. */
    const unsigned char *bytes = view.buf;
    Py_ssize_t start = 0, known = 0;
    int found = 0;
    while (view.len - start >= wanted) {
        Py_ssize_t at = start + wanted - 1;
        while (at >= known && (unsigned char)(bytes[at] - '0') <= 9) {
            at--;
        }
        if (at < known) {
            found = 1;
            break;
        }
        known = start + wanted; /* bytes[at + 1:start + wanted] are digits */
        start = at + 1;
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(found);
}

PyDoc_STRVAR(count_members_doc,
"count_members(value, /)\n"
"--\n\n"
"The colons outside strings of a bytes-like JSON text: for a valid one, the members its\n"
"objects write.");

static PyObject *
count_members(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *at = view.buf, *end = at + view.len;
    Py_ssize_t members = 0;
    while (at < end) {
        unsigned char byte = *at++;
        if (byte == ':') {
            members++;
        } else if (byte == '"') {
            /* To the string's closing quote: the first quote after an even run of
             * backslashes (none included); an unclosed string ends the text. */
            for (;;) {
                const unsigned char *quote = memchr(at, '"', (size_t)(end - at));
                if (quote == NULL) {
                    at = end;
                    break;
                }
                const unsigned char *run = quote;
                while (run > at && run[-1] == '\\') {
                    run--;
                }
                at = quote + 1;
                if (((quote - run) & 1) == 0) {
                    break;
                }
            }
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(members);
}

static Py_ssize_t
keys_of(PyObject *node)
{
    Py_ssize_t total = 0;
    if (PyDict_CheckExact(node)) {
        if (Py_EnterRecursiveCall(" in count_keys")) {
            return -1;
        }
        Py_ssize_t position = 0;
        PyObject *key, *value;
        total = PyDict_GET_SIZE(node);
        while (PyDict_Next(node, &position, &key, &value)) {
            if (!PyDict_CheckExact(value) && !PyList_CheckExact(value)) {
                continue; /* a string, number, true, false or null */
            }
            Py_ssize_t inner = keys_of(value);
            if (inner < 0) {
                total = -1;
                break;
            }
            total += inner;
        }
        Py_LeaveRecursiveCall();
    } else if (PyList_CheckExact(node)) {
        if (Py_EnterRecursiveCall(" in count_keys")) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(node); i++) {
            Py_ssize_t inner = keys_of(PyList_GET_ITEM(node, i));
            if (inner < 0) {
                total = -1;
                break;
            }
            total += inner;
        }
        Py_LeaveRecursiveCall();
    }
    return total;
}

PyDoc_STRVAR(count_keys_doc,
"count_keys(document, /)\n"
"--\n\n"
"The keys of every dict in a decoded JSON document (dicts and lists of them).\n"
"Raises RecursionError for one nested past the recursion limit.");

static PyObject *
count_keys(PyObject *Py_UNUSED(module), PyObject *document)
{
    Py_ssize_t keys = keys_of(document);
    return keys < 0 ? NULL : PyLong_FromSsize_t(keys);
}

static PyMethodDef digits_methods[] = {
    {"has_digit_run", has_digit_run, METH_VARARGS, has_digit_run_doc},
    {"count_members", count_members, METH_O, count_members_doc},
    {"count_keys", count_keys, METH_O, count_keys_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef digits_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "policies._digits",
    .m_doc = "has_digit_run, count_members and count_keys in C (see policies/_digits.c).",
    .m_size = -1,
    .m_methods = digits_methods,
};

PyMODINIT_FUNC
PyInit__digits(void)
{
    return PyModule_Create(&digits_module);
}
