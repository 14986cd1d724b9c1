/*
 * protocol._recscan: the fast path of protocol.records.read_records, the one record reader.
 *
 * It is the gateway's hot loop: a Produce request's records are read here, once, before
 * the gateway decides to forward them. The reference is the full reader in
 * protocol/records.py (_read_fully), which also says in words what is wrong with a batch.
 * The scanner either reads a record exactly as that reader does, or calls it irregular
 * (record_window returns None) and leaves the batch to that reader, so it needs only be
 * right about what it accepts; tests/unit/test_records.py holds it to the reader's
 * answers. It accepts less in one respect: a varint that uses bits Kafka's own reader would
 * drop (a fifth byte above 0x0F, a tenth above 0x01) is irregular here.
 *
 * Memory safety: the untrusted bytes are read only through read_uvarint and the size
 * checks in front of each skip. Every read is bounded by the record's end, itself checked
 * against `stop`, and `stop` against the buffer's length. Sizes are compared as
 * differences (`size > end - offset`) so that no sum can overflow. tests/fuzz/recscan_fuzz.c
 * runs scan_record under AddressSanitizer. The Python objects are made only of fields
 * scan_record has bounded; header_pairs walks a record's headers again through the same
 * read_bytes_field, within the same end.
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

/* The per-field readers below run for every field of every record: inlined wherever they
 * are called. (GCC stops inlining read_bytes_field once header_pairs calls it too, and the
 * scan of a batch then takes twice as long.) */
#if defined(__GNUC__) || defined(__clang__)
#define FIELD_READER static inline __attribute__((always_inline))
#else
#define FIELD_READER static inline
#endif

#define MAX_VARINT_BYTES 5
#define MAX_VARLONG_BYTES 10
#define MAX_WANTED 64

/* Read an unsigned varint of at most max_bytes bytes from b[*offset:limit]. Returns 0 and
 * advances *offset, or -1 when it runs past limit, is longer than max_bytes or sets bits
 * beyond 32 (max_bytes 5) or 64 (max_bytes 10). */
FIELD_READER int
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
FIELD_READER int
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
FIELD_READER int
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
    Py_ssize_t end;           /* where the record ends: the next one's position */
    Py_ssize_t key_start;     /* the key: b[key_start:key_start + key_size] */
    int64_t key_size;         /* -1 for a null key */
    Py_ssize_t value_start;   /* the value: b[value_start:value_start + value_size] */
    int64_t value_size;       /* -1 for a null value */
    Py_ssize_t headers_start; /* the first header, after the header count */
    int64_t header_count;
    uint64_t found;           /* headers read: bit k set when wanted key k is among them */
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
        || read_bytes_field(b, &at, end, &record->key_start, &record->key_size) < 0
        || read_bytes_field(b, &at, end, &record->value_start, &record->value_size) < 0
        || read_varint(b, &at, end, &header_count) < 0 || header_count < 0
        || header_count > (end - at) / 2) { /* each header takes at least two bytes */
        return RECORD_IRREGULAR;
    }
    record->end = end;
    record->headers_start = at;
    record->header_count = header_count;
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

/* Put item (a new reference) in tuple[i]; -1 when it is NULL (an exception is set). */
static inline int
set_item(PyObject *tuple, Py_ssize_t i, PyObject *item)
{
    if (item == NULL) {
        return -1;
    }
    PyTuple_SET_ITEM(tuple, i, item);
    return 0;
}

/* A byte field as the full reader gives it: None when null (size -1), else its first
 * `prefix` bytes (-1: all of them). */
static PyObject *
byte_field(const uint8_t *b, Py_ssize_t start, int64_t size, Py_ssize_t prefix)
{
    if (size < 0) {
        return Py_NewRef(Py_None);
    }
    Py_ssize_t length = prefix < 0 || prefix > size ? (Py_ssize_t)size : prefix;
    return PyBytes_FromStringAndSize((const char *)b + start, length);
}

/* The headers of a record scan_record has read with read_headers (so every field is known
 * to lie within the record): a tuple of (key, value) pairs, the key decoded from UTF-8 with
 * U+FFFD for what is not UTF-8, as the full reader decodes it. */
static PyObject *
header_pairs(const uint8_t *b, const scanned_record *record)
{
    Py_ssize_t at = record->headers_start, key_start, value_start;
    int64_t key_size, value_size;
    PyObject *headers = PyTuple_New((Py_ssize_t)record->header_count);
    if (headers == NULL) {
        return NULL;
    }
    for (Py_ssize_t h = 0; h < (Py_ssize_t)record->header_count; h++) {
        if (read_bytes_field(b, &at, record->end, &key_start, &key_size) < 0 || key_size < 0
            || read_bytes_field(b, &at, record->end, &value_start, &value_size) < 0) {
            PyErr_SetString(PyExc_SystemError, "a header scan_record read is unreadable");
            goto fail;
        }
        PyObject *pair = PyTuple_New(2);
        if (set_item(headers, h, pair) < 0
            || set_item(pair, 0,
                        PyUnicode_DecodeUTF8((const char *)b + key_start, (Py_ssize_t)key_size,
                                             "replace")) < 0
            || set_item(pair, 1, byte_field(b, value_start, value_size, -1)) < 0) {
            goto fail; /* what is not set yet is NULL, which a tuple's release skips */
        }
    }
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

/* The int last made for one of a record's sizes, kept for the next record: the records of
 * a batch mostly share their sizes, so each is made once a window rather than once a
 * record. */
typedef struct {
    int64_t value;
    PyObject *object; /* NULL before the first */
} size_cache;

static PyObject *
size_object(size_cache *cache, int64_t value)
{
    if (cache->object == NULL || cache->value != value) {
        PyObject *made = PyLong_FromLongLong(value);
        if (made == NULL) {
            return NULL;
        }
        Py_XSETREF(cache->object, made);
        cache->value = value;
    }
    return Py_NewRef(cache->object);
}

/* One record as protocol.records.RecordFields: (index, key, value, headers, key_size,
 * value_size, size_in_bytes). sizes: key_size's, value_size's and size_in_bytes' caches. */
static PyObject *
record_fields(const uint8_t *b, Py_ssize_t position, Py_ssize_t index,
              const scanned_record *record, int read_headers, Py_ssize_t key_bytes,
              Py_ssize_t value_bytes, size_cache sizes[3])
{
    PyObject *fields = PyTuple_New(7);
    if (fields == NULL) {
        return NULL;
    }
    if (set_item(fields, 0, PyLong_FromSsize_t(index)) < 0
        || set_item(fields, 1, byte_field(b, record->key_start, record->key_size, key_bytes)) < 0
        || set_item(fields, 2,
                    byte_field(b, record->value_start, record->value_size, value_bytes)) < 0
        || set_item(fields, 3,
                    read_headers && record->header_count ? header_pairs(b, record)
                                                         : PyTuple_New(0)) < 0
        || set_item(fields, 4, size_object(&sizes[0], record->key_size)) < 0
        || set_item(fields, 5, size_object(&sizes[1], record->value_size)) < 0
        || set_item(fields, 6, size_object(&sizes[2], record->end - position)) < 0) {
        Py_DECREF(fields); /* what is not set yet is NULL, which a tuple's release skips */
        return NULL;
    }
    return fields;
}

PyDoc_STRVAR(record_window_doc,
"record_window(wanted, headers, key_bytes, value_bytes, buffer, position, first, count,\n"
"              stop, /)\n"
"--\n\n"
"Read the records lying whole in buffer[:stop] from position (record first) up to record\n"
"count, as protocol.records' full reader reads them with the same headers, key_bytes and\n"
"value_bytes. wanted: None for every record, or a tuple of header keys (bytes, at most 64;\n"
"headers must be true) for only those records that lack one of them. Returns (position,\n"
"index, bytes the record there needs from position on, [RecordFields of the records\n"
"taken]) where it stopped, or None when a record is irregular.");

static PyObject *
record_window(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *wanted, *buffer, *out = NULL, *result = NULL;
    int read_headers;
    Py_ssize_t key_bytes, value_bytes, position, first, count, stop, needed, key_count = 0;
    Py_buffer view;
    wanted_key keys[MAX_WANTED];
    scanned_record record;
    size_cache sizes[3] = {{0, NULL}, {0, NULL}, {0, NULL}};
    uint64_t all = 0;
    if (!PyArg_ParseTuple(args, "OpnnOnnnn:record_window", &wanted, &read_headers, &key_bytes,
                          &value_bytes, &buffer, &position, &first, &count, &stop)) {
        return NULL;
    }
    int every = wanted == Py_None;
    if (!every) {
        if (!PyTuple_Check(wanted)) {
            PyErr_SetString(PyExc_TypeError, "wanted must be None or a tuple of bytes");
            return NULL;
        }
        if (!read_headers) {
            PyErr_SetString(PyExc_ValueError, "wanted keys need headers read");
            return NULL;
        }
        key_count = PyTuple_GET_SIZE(wanted);
        if (key_count > MAX_WANTED) {
            PyErr_SetString(PyExc_ValueError, "at most 64 wanted keys");
            return NULL;
        }
        for (Py_ssize_t k = 0; k < key_count; k++) {
            PyObject *key = PyTuple_GET_ITEM(wanted, k);
            if (!PyBytes_Check(key)) {
                PyErr_SetString(PyExc_TypeError, "wanted keys must be bytes");
                return NULL;
            }
            keys[k].data = PyBytes_AS_STRING(key);
            keys[k].size = PyBytes_GET_SIZE(key);
        }
        all = key_count == MAX_WANTED ? UINT64_MAX : ((uint64_t)1 << key_count) - 1;
    }
    if (key_bytes < -1 || value_bytes < -1) {
        PyErr_SetString(PyExc_ValueError, "key_bytes and value_bytes must be >= -1");
        return NULL;
    }
    if (PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (position < 0 || stop < position || stop > view.len || first < 0 || count < first) {
        PyErr_SetString(PyExc_ValueError,
                        "need 0 <= position <= stop <= len(buffer) and 0 <= first <= count");
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL) {
        goto done;
    }
    const uint8_t *b = view.buf;
    for (Py_ssize_t index = first; index < count; index++) {
        switch (scan_record(b, position, stop, read_headers, keys, key_count, &record, &needed)) {
        case RECORD_CUT:
            result = Py_BuildValue("(nnnO)", position, index, needed, out);
            goto done;
        case RECORD_IRREGULAR:
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (every || record.found != all) {
            PyObject *fields =
                record_fields(b, position, index, &record, read_headers, key_bytes, value_bytes,
                              sizes);
            int appended = fields == NULL ? -1 : PyList_Append(out, fields);
            Py_XDECREF(fields);
            if (appended < 0) {
                goto done;
            }
        }
        position = record.end;
    }
    result = Py_BuildValue("(nnnO)", position, count, (Py_ssize_t)0, out);
done:
    for (int i = 0; i < 3; i++) {
        Py_XDECREF(sizes[i].object);
    }
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef recscan_methods[] = {
    {"record_window", record_window, METH_VARARGS, record_window_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef recscan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "protocol._recscan",
    .m_doc = "The fast path of protocol.records.read_records (see protocol/_recscan.c).",
    .m_size = -1,
    .m_methods = recscan_methods,
};

PyMODINIT_FUNC
PyInit__recscan(void)
{
    return PyModule_Create(&recscan_module);
}

#endif /* RECSCAN_NO_PYTHON */
