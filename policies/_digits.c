/*
 * policies._digits: has_digit_run(value, n), in C.
 *
 * The JSON rules of policies/records.py decode a record value with orjson only when it holds
 * no run of 19 ASCII digits (an integer orjson would turn into a float); the Python way of
 * asking (translate every byte, then search) cost a quarter of a JSON Schema check. Same
 * answer as policies.records._has_digit_run_python, which is used when this is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

static PyMethodDef digits_methods[] = {
    {"has_digit_run", has_digit_run, METH_VARARGS, has_digit_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef digits_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "policies._digits",
    .m_doc = "has_digit_run in C (see policies/_digits.c).",
    .m_size = -1,
    .m_methods = digits_methods,
};

PyMODINIT_FUNC
PyInit__digits(void)
{
    return PyModule_Create(&digits_module);
}
