/*
 * protocol._recscan: the fast record scanners behind protocol.records.check_headers and
 * protocol.records.read_values.
 *
 * They are the gateway's hot loop: a Produce request's records are read here, once, before
 * the gateway decides to forward them. The reference is the full reader in
 * protocol/records.py (_iter_records), which also says in words what is wrong with a batch.
 * A scanner either reads a record exactly as that reader does, or calls it irregular (the
 * window functions return None) and leaves the whole batch to that reader, so it needs only
 * be right about what it accepts; tests/unit/test_records.py holds it to the reader's
 * answers. It accepts less in one respect: a varint that uses bits Kafka's own reader would
 * drop (a fifth byte above 0x0F, a tenth above 0x01) is irregular here.
 *
 * Memory safety: the untrusted bytes are read only through read_uvarint and the size
 * checks in front of each skip. Every read is bounded by the record's end, itself checked
 * against `stop`, and `stop` against the buffer's length. Sizes are compared as
 * differences (`size > end - offset`) so that no sum can overflow. tests/fuzz/recscan_fuzz.c
 * runs scan_record under AddressSanitizer.
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
 * a count of 0 must end it, as the full reader has it. */
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

/* The records lying whole in buffer[:stop], from position (record `first`) up to record
 * `count`. With read_headers, the index of each record that lacks one of the wanted keys is
 * appended to `out`; without, each record's value (bytes, or None for a null one). Returns
 * (position, index, bytes the record there needs from position on) where it stopped, None
 * when a record is irregular, NULL with an exception set. */
static PyObject *
scan_window(PyObject *buffer, Py_ssize_t position, Py_ssize_t first, Py_ssize_t count,
            Py_ssize_t stop, int read_headers, PyObject *wanted, PyObject *out)
{
    Py_buffer view;
    Py_ssize_t needed, key_count = 0;
    PyObject *result = NULL;
    wanted_key keys[MAX_WANTED];
    scanned_record record;
    uint64_t all = 0;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (position < 0 || stop < position || stop > view.len || first < 0 || count < first) {
        PyErr_SetString(PyExc_ValueError,
                        "need 0 <= position <= stop <= len(buffer) and 0 <= first <= count");
        goto done;
    }
    if (read_headers) {
        key_count = PyTuple_GET_SIZE(wanted);
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
        all = key_count == MAX_WANTED ? UINT64_MAX : ((uint64_t)1 << key_count) - 1;
    }
    const uint8_t *b = view.buf;
    for (Py_ssize_t index = first; index < count; index++) {
        switch (scan_record(b, position, stop, read_headers, keys, key_count, &record, &needed)) {
        case RECORD_CUT:
            result = Py_BuildValue("(nnn)", position, index, needed);
            goto done;
        case RECORD_IRREGULAR:
            result = Py_NewRef(Py_None);
            goto done;
        }
        PyObject *item = NULL;
        if (!read_headers) {
            item = record.value_size < 0
                       ? Py_NewRef(Py_None)
                       : PyBytes_FromStringAndSize((const char *)b + record.value_start,
                                                   (Py_ssize_t)record.value_size);
        } else if (record.found != all) {
            item = PyLong_FromSsize_t(index);
        } else {
            position = record.end;
            continue;
        }
        int appended = item == NULL ? -1 : PyList_Append(out, item);
        Py_XDECREF(item);
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

PyDoc_STRVAR(header_window_doc,
"header_window(wanted, missing, buffer, position, first, count, stop, /)\n"
"--\n\n"
"Check the records lying whole in buffer[:stop] from position (record first) up to\n"
"record count, appending to the list missing the index of each that lacks a header key\n"
"of the tuple wanted (bytes, at most 64). Returns (position, index, bytes needed) where\n"
"it stopped, or None when a record is irregular.");

static PyObject *
header_window(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *wanted, *missing, *buffer;
    Py_ssize_t position, first, count, stop;
    if (!PyArg_ParseTuple(args, "O!O!Onnnn:header_window", &PyTuple_Type, &wanted,
                          &PyList_Type, &missing, &buffer, &position, &first, &count, &stop)) {
        return NULL;
    }
    return scan_window(buffer, position, first, count, stop, 1, wanted, missing);
}

PyDoc_STRVAR(values_window_doc,
"values_window(values, buffer, position, first, count, stop, /)\n"
"--\n\n"
"Append to the list values each value (bytes, or None for a null one) of the records\n"
"lying whole in buffer[:stop] from position (record first) up to record count. Headers\n"
"are counted, not read. Returns (position, index, bytes needed) where it stopped, or\n"
"None when a record is irregular.");

static PyObject *
values_window(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *values, *buffer;
    Py_ssize_t position, first, count, stop;
    if (!PyArg_ParseTuple(args, "O!Onnnn:values_window", &PyList_Type, &values, &buffer,
                          &position, &first, &count, &stop)) {
        return NULL;
    }
    return scan_window(buffer, position, first, count, stop, 0, NULL, values);
}

static PyMethodDef recscan_methods[] = {
    {"header_window", header_window, METH_VARARGS, header_window_doc},
    {"values_window", values_window, METH_VARARGS, values_window_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef recscan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "protocol._recscan",
    .m_doc = "The fast record scanners of protocol.records (see protocol/_recscan.c).",
    .m_size = -1,
    .m_methods = recscan_methods,
};

PyMODINIT_FUNC
PyInit__recscan(void)
{
    return PyModule_Create(&recscan_module);
}

#endif /* RECSCAN_NO_PYTHON */
