/*
 * policies._digits: has_digit_run(value, n), count_members(value), count_keys(document),
 * double_suspects(value) and scan_json(value) (the last two at once), in C.
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
 *
 * double_suspects(value) lists the numbers a JSON Schema judges as doubles that are not the
 * number written (1000.0000000000000000001 is the double 1000.0); policies.records finds
 * them by decoding again without this module.
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

/* Past a JSON string whose opening quote is just before `at`: past the first quote after an
 * even run of backslashes (none included); an unclosed string ends the text. */
static const unsigned char *
past_string(const unsigned char *at, const unsigned char *end)
{
    for (;;) {
        const unsigned char *quote = memchr(at, '"', (size_t)(end - at));
        if (quote == NULL) {
            return end;
        }
        const unsigned char *run = quote;
        while (run > at && run[-1] == '\\') {
            run--;
        }
        at = quote + 1;
        if (((quote - run) & 1) == 0) {
            return at;
        }
    }
}

PyDoc_STRVAR(count_members_doc,
"count_members(value, /)\n"
"--\n\n"
"The colons outside strings of a bytes-like JSON text: for a valid one, the members its\n"
"objects write.");

static int scan_text(const unsigned char *at, const unsigned char *end, Py_ssize_t *members,
                     PyObject *found);

static PyObject *
count_members(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Py_ssize_t members = 0;
    const unsigned char *at = view.buf;
    scan_text(at, at + view.len, &members, NULL);
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

/* The most significant digits a double's repr has. */
#define REPR_DIGITS 17
/* An exponent past this (either way) is read as this: no mantissa a frame can hold brings a
 * number written with it back into the doubles' range. */
#define EXPONENT_CAP 1000000000000000LL

/* The value of the number text[0:size] (-? digits (. digits)? ([eE] [+-]? digits)?): its
 * sign, its significant digits (no leading or trailing zeros) into digits[0:*count], and the
 * power of ten of the first (*count 0: zero, whatever its exponent). -1 when it has more than
 * REPR_DIGITS significant digits, an exponent past EXPONENT_CAP, or is no such number (inf):
 * then it is no double's repr. */
static int
decimal_value(const char *text, Py_ssize_t size, char *digits, int *count, long long *power,
              int *negative)
{
    const char *at = text, *end = text + size;
    long long whole = 0, index = 0, first = -1, zeros = 0, exponent = 0;
    int fraction = 0, exponent_negative = 0;
    *count = 0;
    *negative = at < end && *at == '-';
    at += *negative;
    for (; at < end; at++) {
        if (*at == '.') {
            fraction = 1;
            continue;
        }
        if ((unsigned char)(*at - '0') > 9) {
            break;
        }
        whole += !fraction;
        if (*at == '0') {
            zeros += first >= 0;
        } else {
            if (first < 0) {
                first = index;
            }
            if (*count + zeros + 1 > REPR_DIGITS) {
                return -1;
            }
            memset(digits + *count, '0', (size_t)zeros);
            *count += (int)zeros;
            zeros = 0;
            digits[(*count)++] = *at;
        }
        index++;
    }
    if (at < end && (*at == 'e' || *at == 'E')) {
        at++;
        if (at < end && (*at == '+' || *at == '-')) {
            exponent_negative = *at == '-';
            at++;
        }
        for (; at < end && (unsigned char)(*at - '0') <= 9; at++) {
            if (exponent < EXPONENT_CAP) {
                exponent = exponent * 10 + (*at - '0');
            }
        }
    }
    if (at != end || index == 0) {
        return -1;
    }
    if (*count == 0) {
        return 0;
    }
    if (exponent >= EXPONENT_CAP) {
        return -1;
    }
    *power = whole - 1 - first + (exponent_negative ? -exponent : exponent);
    return 0;
}

/* Whether the number text[0:size] is the number Python prints its double as (repr), however
 * written (30000000000000004e-17 is the double 0.30000000000000004): then a reader of exact
 * decimals and the schema read one number. */
static int
reads_alike(const char *text, Py_ssize_t size)
{
    char digits[REPR_DIGITS], again[REPR_DIGITS];
    int count, negative, again_count, again_negative;
    long long power = 0, again_power = 0;
    if (decimal_value(text, size, digits, &count, &power, &negative) < 0) {
        return 0;
    }
    if (count == 0) {
        return 1; /* zero: its double is 0.0 or -0.0, the same number */
    }
    if (power > 400 || power < -400) {
        return 0; /* past the doubles' range: inf or 0.0 */
    }
    /* The same number in at most 30 characters, which Python's correctly rounded reading
     * takes to the same double as the text. */
    char shortest[48];
    snprintf(shortest, sizeof(shortest), "%s0.%.*se%lld", negative ? "-" : "", count, digits,
             power + 1);
    char *parsed_to = NULL;
    double value = PyOS_string_to_double(shortest, &parsed_to, NULL);
    if (value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (*parsed_to != '\0') {
        return 0;
    }
    char *printed = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (printed == NULL) {
        PyErr_Clear();
        return 0;
    }
    int same = decimal_value(printed, (Py_ssize_t)strlen(printed), again, &again_count,
                             &again_power, &again_negative) == 0
               && again_count == count && again_negative == negative && again_power == power
               && memcmp(again, digits, (size_t)count) == 0;
    PyMem_Free(printed);
    return same;
}

PyDoc_STRVAR(double_suspects_doc,
"double_suspects(value, /)\n"
"--\n\n"
"The numbers outside strings of a bytes-like JSON text whose double is another number, as\n"
"bytes, in text order. Only numbers with a fraction or an exponent that have more than 15\n"
"significant digits, an exponent of 3 digits or more or more than 100 digits before the\n"
"exponent are asked (15 significant digits, an exponent within 99 and at most 100 digits\n"
"always tell two numbers apart as doubles), and one is listed unless it is the number its\n"
"double prints as (repr), however written. policies.records decides each listed one again.");

/* The most digits a number may write before its exponent and still be told apart as a
 * double by its significant digits alone: with an exponent within 99, its first significant
 * digit then stands within 10^-199 and 10^199, where doubles hold 15 digits. Zeros moved it
 * anywhere: 0.<400 zeros>1 is the double 0.0, 1<400 zeros>.0 is inf. */
#define MANTISSA_DIGITS 100

/* Past the number at `at` (a '-' or a digit): -? digits (. digits)? ([eE] [+-]? digits)?,
 * read leniently (the decoder has already refused a malformed one). *suspect: it has a
 * fraction or an exponent, more than 15 significant digits (zeros count only between or
 * before other digits: 1.000000000000000000 has one), an exponent of 3 digits or more or
 * more than MANTISSA_DIGITS digits before its exponent, and is not the number its double
 * prints as (reads_alike). */
static const unsigned char *
past_number(const unsigned char *at, const unsigned char *end, int *suspect)
{
    const unsigned char *start = at;
    Py_ssize_t significant = 0, zeros = 0, exponent_digits = 0, digits = 0;
    int nonzero = 0, fractional = 0;
    if (*at == '-') {
        at++;
    }
    for (; at < end; at++) {
        if (*at == '.') {
            fractional = 1;
            continue;
        }
        if (*at == '0') {
            zeros += nonzero;
        } else if ((unsigned char)(*at - '1') <= 8) {
            nonzero = 1;
            significant += zeros + 1;
            zeros = 0;
        } else {
            break;
        }
        digits++;
    }
    if (at < end && (*at == 'e' || *at == 'E')) {
        fractional = 1;
        at++;
        if (at < end && (*at == '+' || *at == '-')) {
            at++;
        }
        while (at < end && *at == '0') {
            at++;
        }
        for (; at < end && (unsigned char)(*at - '0') <= 9; at++) {
            exponent_digits++;
        }
    }
    *suspect = fractional
               && (significant > 15 || exponent_digits >= 3 || digits > MANTISSA_DIGITS)
               && !reads_alike((const char *)start, at - start);
    return at;
}

/* One pass over a JSON text: the colons outside strings into *members and, when `found` is a
 * list, each double suspect appended to it (NULL: numbers are not read). -1 with an
 * exception set when appending fails. */
static int
scan_text(const unsigned char *at, const unsigned char *end, Py_ssize_t *members,
          PyObject *found)
{
    while (at < end) {
        unsigned char byte = *at;
        if (byte == '"') {
            at = past_string(at + 1, end);
            continue;
        }
        if (byte == ':') {
            (*members)++;
        }
        if (found == NULL || (byte != '-' && (unsigned char)(byte - '0') > 9)) {
            at++;
            continue;
        }
        const unsigned char *start = at;
        int suspect = 0;
        at = past_number(at, end, &suspect);
        if (suspect) {
            PyObject *number = PyBytes_FromStringAndSize((const char *)start, at - start);
            if (number == NULL || PyList_Append(found, number) < 0) {
                Py_XDECREF(number);
                return -1;
            }
            Py_DECREF(number);
        }
    }
    return 0;
}

/* (members, suspects) of a bytes-like JSON text, or only the suspects. */
static PyObject *
scan(PyObject *arg, int with_members)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *found = PyList_New(0);
    Py_ssize_t members = 0;
    const unsigned char *at = view.buf;
    if (found != NULL && scan_text(at, at + view.len, &members, found) < 0) {
        Py_CLEAR(found);
    }
    PyBuffer_Release(&view);
    if (found == NULL || !with_members) {
        return found;
    }
    PyObject *answer = Py_BuildValue("(nN)", members, found);
    return answer;
}

static PyObject *
double_suspects(PyObject *Py_UNUSED(module), PyObject *arg)
{
    return scan(arg, 0);
}

PyDoc_STRVAR(scan_json_doc,
"scan_json(value, /)\n"
"--\n\n"
"(count_members(value), double_suspects(value)) in one pass over the text.");

static PyObject *
scan_json(PyObject *Py_UNUSED(module), PyObject *arg)
{
    return scan(arg, 1);
}

static PyMethodDef digits_methods[] = {
    {"has_digit_run", has_digit_run, METH_VARARGS, has_digit_run_doc},
    {"count_members", count_members, METH_O, count_members_doc},
    {"count_keys", count_keys, METH_O, count_keys_doc},
    {"double_suspects", double_suspects, METH_O, double_suspects_doc},
    {"scan_json", scan_json, METH_O, scan_json_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef digits_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "policies._digits",
    .m_doc = "has_digit_run, count_members, count_keys, double_suspects and scan_json in C "
             "(see policies/_digits.c).",
    .m_size = -1,
    .m_methods = digits_methods,
};

PyMODINIT_FUNC
PyInit__digits(void)
{
    return PyModule_Create(&digits_module);
}
