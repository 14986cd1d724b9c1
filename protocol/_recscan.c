/*
 * protocol._recscan: the two record scanners of protocol/records.py, in C.
 *
 * header_window and values_window do what records._scan_window and records._values_window
 * do, over the same arguments, and give the same answers wherever those give one. They
 * are the gateway's hot loop: a Produce request's records are read here, once, before the
 * gateway decides to forward them. Python remains the reference: records.py keeps its own
 * scanners (used when this module is not built) and the full reader, which says what is
 * wrong with a batch in words; the tests hold all three to the same answers.
 *
 * Both scanners return None ("irregular") for anything out of the ordinary and let the
 * full reader have the last word, so they need only be right about what they accept. They
 * accept less than the Python scanners in one respect: a varint that uses bits Kafka's
 * own reader would drop (a fifth byte above 0x0F, a tenth above 0x01) is irregular here.
 *
 * Memory safety: the untrusted bytes are read only through read_uvarint and the size
 * checks in front of each skip. Every read is bounded by the record's end, itself checked
 * against `stop`, and `stop` against the buffer's length. Sizes are compared as
 * differences (`size > end - offset`) so that no sum can overflow.
 */
#ifndef RECSCAN_NO_PYTHON
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#else
/* The scanning core alone, for tests/fuzz/recscan_fuzz.c (built with AddressSanitizer). */
#include <stddef.h>
typedef ptrdiff_t Py_ssize_t;
#endif
#include <stdint.h>
#include <string.h>

#define MAX_VARINT_BYTES 5
#define MAX_VARLONG_BYTES 10
#define MAX_WANTED 64

/* Read an unsigned varint of at most max_bytes bytes from b[*offset:limit]. Returns 0 and
 * advances *offset, or -1 when it runs past limit, is longer than max_bytes or sets bits
 * beyond 32 (max_bytes 5) or 64 (max_bytes 10). */
static inline int
read_uvarint(const uint8_t *b, Py_ssize_t *offset, Py_ssize_t limit, int max_bytes,
             uint64_t *out)
{
    uint64_t value = 0;
    Py_ssize_t at = *offset;
    for (int i = 0; i < max_bytes; i++) {
        if (at >= limit) {
            return -1;
        }
        uint8_t byte = b[at++];
        if (i == max_bytes - 1 && byte > (max_bytes == MAX_VARINT_BYTES ? 0x0F : 0x01)) {
            return -1;
        }
        value |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            *offset = at;
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* A zigzag-encoded int32 (Kafka's varint). */
static inline int
read_varint(const uint8_t *b, Py_ssize_t *offset, Py_ssize_t limit, int64_t *out)
{
    uint64_t raw;
    if (read_uvarint(b, offset, limit, MAX_VARINT_BYTES, &raw) < 0) {
        return -1;
    }
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

/* A nullable byte field (size varint, then the bytes) that must lie within b[:limit]:
 * stores its start and size (-1 for null) and moves *offset past it. */
static inline int
read_bytes_field(const uint8_t *b, Py_ssize_t *offset, Py_ssize_t limit, Py_ssize_t *start,
                 int64_t *size)
{
    if (read_varint(b, offset, limit, size) < 0 || *size < -1) {
        return -1;
    }
    *start = *offset;
    if (*size > 0) {
        if (*size > limit - *offset) {
            return -1;
        }
        *offset += (Py_ssize_t)*size;
    }
    return 0;
}

typedef struct {
    const char *data;
    Py_ssize_t size;
} wanted_key;

typedef struct {
    Py_ssize_t end;         /* where the record ends: the next one's position */
    Py_ssize_t value_start; /* the value: b[value_start:value_start + value_size] */
    int64_t value_size;     /* -1 for a null value */
    uint64_t found;         /* headers read: bit k set when wanted key k is among them */
} scanned_record;

enum { RECORD_IRREGULAR = -1, RECORD_READ = 0, RECORD_CUT = 1 };

/* Read the record at b[position:], which must lie whole in b[:stop]. RECORD_CUT when it
 * does not (*needed: how many bytes from position it needs), RECORD_IRREGULAR for anything
 * the full reader should look at. With read_headers, every header is read and its key
 * matched against keys; without, the header count must fit what is left of the record and
 * a count of 0 must end it (records._values_window). */
static int
scan_record(const uint8_t *b, Py_ssize_t position, Py_ssize_t stop, int read_headers,
            const wanted_key *keys, Py_ssize_t key_count, scanned_record *record,
            Py_ssize_t *needed)
{
    Py_ssize_t at = position, end, start;
    int64_t length, size, header_count;
    uint64_t ignored;
    if (stop - position < MAX_VARINT_BYTES) { /* a record takes at least 7 bytes */
        *needed = MAX_VARINT_BYTES;
        return RECORD_CUT;
    }
    if (read_varint(b, &at, stop, &length) < 0 || length < 0) {
        return RECORD_IRREGULAR;
    }
    if (length > stop - at) {
        *needed = (Py_ssize_t)(at - position + length);
        return RECORD_CUT;
    }
    end = at + (Py_ssize_t)length;
    if (at >= end) { /* attributes: one byte, any value */
        return RECORD_IRREGULAR;
    }
    at += 1;
    if (read_uvarint(b, &at, end, MAX_VARLONG_BYTES, &ignored) < 0 /* timestamp delta */
        || read_uvarint(b, &at, end, MAX_VARINT_BYTES, &ignored) < 0 /* offset delta */
        || read_bytes_field(b, &at, end, &start, &size) < 0 /* key */
        || read_bytes_field(b, &at, end, &record->value_start, &record->value_size) < 0
        || read_varint(b, &at, end, &header_count) < 0 || header_count < 0
        || header_count > (end - at) / 2) { /* each header takes at least two bytes */
        return RECORD_IRREGULAR;
    }
    record->end = end;
    record->found = 0;
    if (!read_headers) {
        return header_count == 0 && at != end ? RECORD_IRREGULAR : RECORD_READ;
    }
    for (int64_t h = 0; h < header_count; h++) {
        if (read_bytes_field(b, &at, end, &start, &size) < 0 || size < 0) { /* the key */
            return RECORD_IRREGULAR;
        }
        for (Py_ssize_t k = 0; k < key_count; k++) {
            if (keys[k].size == size && memcmp(keys[k].data, b + start, (size_t)size) == 0) {
                record->found |= (uint64_t)1 << k;
            }
        }
        if (read_bytes_field(b, &at, end, &start, &size) < 0) { /* the value */
            return RECORD_IRREGULAR;
        }
    }
    return at == end ? RECORD_READ : RECORD_IRREGULAR;
}

#ifndef RECSCAN_NO_PYTHON

/* Shared argument checks: 0 <= position <= stop <= len(buffer), 0 <= first <= count. */
static int
check_window(const Py_buffer *view, Py_ssize_t position, Py_ssize_t first, Py_ssize_t count,
             Py_ssize_t stop)
{
    if (position < 0 || stop < position || stop > view->len || first < 0 || count < first) {
        PyErr_SetString(PyExc_ValueError,
                        "need 0 <= position <= stop <= len(buffer) and 0 <= first <= count");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(header_window_doc,
"header_window(buffer, position, first, count, stop, wanted, missing, /)\n"
"--\n\n"
"records._scan_window in C: check the records lying whole in buffer[:stop] from\n"
"position (record first) up to record count, appending to the list missing the index\n"
"of each that lacks a header key of the tuple wanted (bytes, at most 64). Returns\n"
"(position, index, bytes needed) where it stopped, or None when irregular.");

static PyObject *
header_window(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t position, first, count, stop, needed;
    PyObject *wanted, *missing, *result = NULL;
    wanted_key keys[MAX_WANTED];
    scanned_record record;
    if (!PyArg_ParseTuple(args, "y*nnnnO!O!:header_window", &view, &position, &first, &count,
                          &stop, &PyTuple_Type, &wanted, &PyList_Type, &missing)) {
        return NULL;
    }
    Py_ssize_t key_count = PyTuple_GET_SIZE(wanted);
    if (check_window(&view, position, first, count, stop) < 0) {
        goto done;
    }
    if (key_count > MAX_WANTED) {
        PyErr_SetString(PyExc_ValueError, "at most 64 wanted keys");
        goto done;
    }
    for (Py_ssize_t k = 0; k < key_count; k++) {
        PyObject *key = PyTuple_GET_ITEM(wanted, k);
        if (!PyBytes_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "wanted keys must be bytes");
            goto done;
        }
        keys[k].data = PyBytes_AS_STRING(key);
        keys[k].size = PyBytes_GET_SIZE(key);
    }
    const uint64_t all = key_count == MAX_WANTED ? UINT64_MAX : ((uint64_t)1 << key_count) - 1;
    for (Py_ssize_t index = first; index < count; index++) {
        switch (scan_record(view.buf, position, stop, 1, keys, key_count, &record, &needed)) {
        case RECORD_CUT:
            result = Py_BuildValue("(nnn)", position, index, needed);
            goto done;
        case RECORD_IRREGULAR:
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (record.found != all) {
            PyObject *number = PyLong_FromSsize_t(index);
            int appended = number == NULL ? -1 : PyList_Append(missing, number);
            Py_XDECREF(number);
            if (appended < 0) {
                goto done;
            }
        }
        position = record.end;
    }
    result = Py_BuildValue("(nnn)", position, count, (Py_ssize_t)0);
done:
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(values_window_doc,
"values_window(buffer, position, first, count, stop, values, /)\n"
"--\n\n"
"records._values_window in C: append to the list values each value (bytes, or None\n"
"for a null one) of the records lying whole in buffer[:stop] from position (record\n"
"first) up to record count. Headers are counted, not read. Returns (position, index,\n"
"bytes needed) where it stopped, or None when irregular.");

static PyObject *
values_window(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t position, first, count, stop, needed;
    PyObject *values, *result = NULL;
    scanned_record record;
    if (!PyArg_ParseTuple(args, "y*nnnnO!:values_window", &view, &position, &first, &count,
                          &stop, &PyList_Type, &values)) {
        return NULL;
    }
    if (check_window(&view, position, first, count, stop) < 0) {
        goto done;
    }
    const char *b = view.buf;
    for (Py_ssize_t index = first; index < count; index++) {
        switch (scan_record(view.buf, position, stop, 0, NULL, 0, &record, &needed)) {
        case RECORD_CUT:
            result = Py_BuildValue("(nnn)", position, index, needed);
            goto done;
        case RECORD_IRREGULAR:
            result = Py_NewRef(Py_None);
            goto done;
        }
        PyObject *value = record.value_size < 0
                              ? Py_NewRef(Py_None)
                              : PyBytes_FromStringAndSize(b + record.value_start,
                                                          (Py_ssize_t)record.value_size);
        int appended = value == NULL ? -1 : PyList_Append(values, value);
        Py_XDECREF(value);
        if (appended < 0) {
            goto done;
        }
        position = record.end;
    }
    result = Py_BuildValue("(nnn)", position, count, (Py_ssize_t)0);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef recscan_methods[] = {
    {"header_window", header_window, METH_VARARGS, header_window_doc},
    {"values_window", values_window, METH_VARARGS, values_window_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef recscan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "protocol._recscan",
    .m_doc = "The record scanners of protocol.records, in C (see protocol/_recscan.c).",
    .m_size = -1,
    .m_methods = recscan_methods,
};

PyMODINIT_FUNC
PyInit__recscan(void)
{
    return PyModule_Create(&recscan_module);
}

#endif /* RECSCAN_NO_PYTHON */
