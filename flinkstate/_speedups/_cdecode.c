/* The compiled fast path of keyed-state decoding: codec trees built once per snapshot from a spec of nested tuples
 * (see flinkstate/_speedups/__init__.py, which is the only place that builds them) and a block scanner that walks a
 * key-group block and decodes the entries of one state in one pass.
 *
 * The pure-Python codecs are the reference. This code must return exactly what they return, or fail: every failure
 * (bounds, a malformed byte, a Python fallback that raised) makes the caller rerun the pure-Python path on the same
 * bytes, which then raises the reference's own error (or, if it does not fail, its values are used). So the checks
 * here may be stricter than the reference's, never looser.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000
#define PyFloat_Unpack4 _PyFloat_Unpack4
#define PyFloat_Unpack8 _PyFloat_Unpack8
#endif

/* Spec kinds: keep in sync with flinkstate/_speedups/__init__.py. */
enum {
    K_LONG = 0, K_INT = 1, K_SHORT = 2, K_BYTE = 3, K_BOOL = 4, K_FLOAT = 5, K_DOUBLE = 6, K_CHAR = 7,
    K_STRING = 8, K_CONST = 9, K_POJO = 10, K_TUPLE = 11, K_ROW = 12, K_LIST = 13, K_MAP = 14, K_NULLABLE = 15,
    K_PY = 16, K_BROW = 17
};

/* BinaryRowData slot kinds (K_BROW). */
enum { S_NULL = 0, S_BOOL = 1, S_I8 = 2, S_I16 = 3, S_I32 = 4, S_I64 = 5, S_F32 = 6, S_F64 = 7, S_TEXT = 8,
       S_BYTES = 9, S_PY = 10 };

/* Entry kinds. */
enum { E_VALUE = 0, E_LIST = 1, E_MAP = 2, E_TIMER = 3 };

static PyObject *DecodeError;

typedef struct Node {
    int kind;
    Py_ssize_t n;          /* children */
    struct Node **children;
    PyObject *obj;         /* POJO: names tuple; CONST: the value; PY: the decoder; */
    PyObject *fallback;    /* POJO/ROW: the reference decoder, for subclasses and row kinds */
    Py_ssize_t param;      /* CONST: bytes consumed; ROW: with_kind; NULLABLE: padding */
    int *slots;            /* K_BROW: per field, slot kind; reservations in `reserve` */
    int *reserve;
    PyObject **readers;    /* K_BROW: per field, the reference slot reader for S_PY (borrowed from obj) */
} Node;

typedef struct {
    PyObject *bufobj;
    const unsigned char *p;
    Py_ssize_t size;
} Ctx;

static void node_free(Node *node) {
    if (node == NULL) return;
    for (Py_ssize_t i = 0; i < node->n; i++) node_free(node->children[i]);
    PyMem_Free(node->children);
    PyMem_Free(node->slots);
    PyMem_Free(node->reserve);
    PyMem_Free(node->readers);
    Py_XDECREF(node->obj);
    Py_XDECREF(node->fallback);
    PyMem_Free(node);
}

static Node *node_compile(PyObject *spec);

static int compile_children(Node *node, PyObject *seq) {
    if (!PyTuple_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "spec children must be a tuple");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    node->children = PyMem_Calloc(n ? n : 1, sizeof(Node *));
    if (node->children == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    node->n = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        node->children[i] = node_compile(PyTuple_GET_ITEM(seq, i));
        if (node->children[i] == NULL) return -1;
    }
    return 0;
}

static Node *node_compile(PyObject *spec) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1) {
        PyErr_SetString(PyExc_TypeError, "a spec is a non-empty tuple");
        return NULL;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (kind == -1 && PyErr_Occurred()) return NULL;
    Node *node = PyMem_Calloc(1, sizeof(Node));
    if (node == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    node->kind = (int)kind;
    Py_ssize_t size = PyTuple_GET_SIZE(spec);
#define ARG(i) (size > (i) ? PyTuple_GET_ITEM(spec, (i)) : NULL)
#define NEED(count) if (size < (count)) { PyErr_Format(PyExc_TypeError, "spec kind %ld needs %d items", kind, \
                                                       (int)(count)); goto fail; }
    switch (kind) {
    case K_LONG: case K_INT: case K_SHORT: case K_BYTE: case K_BOOL: case K_FLOAT: case K_DOUBLE: case K_CHAR:
    case K_STRING:
        break;
    case K_CONST:  /* (K_CONST, value, bytes consumed) */
        NEED(3);
        node->obj = Py_NewRef(ARG(1));
        node->param = PyLong_AsSsize_t(ARG(2));
        if (node->param < 0) goto fail;
        break;
    case K_POJO:  /* (K_POJO, names, children, fallback) */
        NEED(4);
        if (!PyTuple_Check(ARG(1))) { PyErr_SetString(PyExc_TypeError, "POJO names must be a tuple"); goto fail; }
        node->obj = Py_NewRef(ARG(1));
        if (compile_children(node, ARG(2)) < 0) goto fail;
        if (node->n != PyTuple_GET_SIZE(node->obj)) {
            PyErr_SetString(PyExc_TypeError, "POJO names and children differ in length");
            goto fail;
        }
        node->fallback = Py_NewRef(ARG(3));
        break;
    case K_TUPLE:  /* (K_TUPLE, children) */
        NEED(2);
        if (compile_children(node, ARG(1)) < 0) goto fail;
        break;
    case K_ROW:  /* (K_ROW, children, with_kind, fallback) */
        NEED(4);
        if (compile_children(node, ARG(1)) < 0) goto fail;
        node->param = PyObject_IsTrue(ARG(2));
        node->fallback = Py_NewRef(ARG(3));
        break;
    case K_LIST:  /* (K_LIST, element) */
        NEED(2);
        if (compile_children(node, PyTuple_GetSlice(spec, 1, 2)) < 0) goto fail;
        break;
    case K_MAP:  /* (K_MAP, key, value) */
        NEED(3);
        {
            PyObject *pair = PyTuple_GetSlice(spec, 1, 3);
            if (pair == NULL) goto fail;
            int rc = compile_children(node, pair);
            Py_DECREF(pair);
            if (rc < 0) goto fail;
        }
        break;
    case K_NULLABLE:  /* (K_NULLABLE, inner, padding) */
        NEED(3);
        {
            PyObject *one = PyTuple_GetSlice(spec, 1, 2);
            if (one == NULL) goto fail;
            int rc = compile_children(node, one);
            Py_DECREF(one);
            if (rc < 0) goto fail;
        }
        node->param = PyLong_AsSsize_t(ARG(2));
        if (node->param < 0) goto fail;
        break;
    case K_PY:  /* (K_PY, decoder) */
        NEED(2);
        node->obj = Py_NewRef(ARG(1));
        break;
    case K_BROW:  /* (K_BROW, ((slot kind, reservation, reader or None), ...), fallback) */
        NEED(3);
        if (!PyTuple_Check(ARG(1))) { PyErr_SetString(PyExc_TypeError, "BinaryRowData fields: a tuple"); goto fail; }
        node->obj = Py_NewRef(ARG(1));
        node->fallback = Py_NewRef(ARG(2));
        node->param = PyTuple_GET_SIZE(ARG(1));
        node->slots = PyMem_Calloc(node->param + 1, sizeof(int));
        node->reserve = PyMem_Calloc(node->param + 1, sizeof(int));
        node->readers = PyMem_Calloc(node->param + 1, sizeof(PyObject *));
        if (node->slots == NULL || node->reserve == NULL || node->readers == NULL) { PyErr_NoMemory(); goto fail; }
        for (Py_ssize_t i = 0; i < node->param; i++) {
            PyObject *field = PyTuple_GET_ITEM(ARG(1), i);
            if (!PyTuple_Check(field) || PyTuple_GET_SIZE(field) != 3) {
                PyErr_SetString(PyExc_TypeError, "a BinaryRowData field is (kind, reservation, reader)");
                goto fail;
            }
            node->slots[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(field, 0));
            node->reserve[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(field, 1));
            if (PyErr_Occurred()) goto fail;
            node->readers[i] = PyTuple_GET_ITEM(field, 2);
            if (node->slots[i] < S_NULL || node->slots[i] > S_PY ||
                (node->slots[i] == S_PY && !PyCallable_Check(node->readers[i]))) {
                PyErr_SetString(PyExc_ValueError, "bad BinaryRowData slot kind");
                goto fail;
            }
        }
        break;
    default:
        PyErr_Format(PyExc_ValueError, "unknown spec kind %ld", kind);
        goto fail;
    }
    return node;
fail:
    node_free(node);
    return NULL;
#undef ARG
#undef NEED
}

/* -- reading ---------------------------------------------------------------------------------------------------- */

static PyObject *short_read(Py_ssize_t off) {
    PyErr_Format(DecodeError, "out of bounds at %zd", off);
    return NULL;
}

#define NEED_BYTES(ctx, off, n) if ((off) < 0 || (n) > (ctx)->size - (off)) return short_read(off)

static inline uint64_t be64(const unsigned char *p) {
    return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) | ((uint64_t)p[3] << 32) |
           ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) | ((uint64_t)p[6] << 8) | (uint64_t)p[7];
}

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Unsigned LEB128, limited to 63 bits (longer ones fall back to the reference). 0 on success. */
static inline int leb128(Ctx *ctx, Py_ssize_t *off, uint64_t *value) {
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t o = *off;
    for (;;) {
        if (o >= ctx->size || shift > 56) return -1;
        unsigned char b = ctx->p[o++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) break;
        shift += 7;
    }
    *off = o;
    *value = result;
    return 0;
}

/* Flink's StringValue form (StringSerializer): LEB128 length + 1 (0 = null), then each UTF-16 unit as LEB128. */
static PyObject *decode_string(Ctx *ctx, Py_ssize_t *off) {
    uint64_t n1;
    Py_ssize_t o = *off;
    if (leb128(ctx, &o, &n1) < 0) return short_read(o);
    if (n1 == 0) {
        *off = o;
        Py_RETURN_NONE;
    }
    uint64_t n = n1 - 1;
    if (n > (uint64_t)(ctx->size - o)) return short_read(o);  /* every unit takes at least one byte */
    const unsigned char *p = ctx->p + o;
    Py_ssize_t i = 0;
    while (i < (Py_ssize_t)n && p[i] < 0x80) i++;
    if (i == (Py_ssize_t)n) {  /* ASCII: one byte per character */
        PyObject *s = PyUnicode_New((Py_ssize_t)n, 127);
        if (s == NULL) return NULL;
        memcpy(PyUnicode_DATA(s), p, (size_t)n);
        *off = o + (Py_ssize_t)n;
        return s;
    }
    /* Some units take more than one byte: gather them as UTF-16-BE and decode as the reference does. */
    unsigned char *units = PyMem_Malloc((size_t)n * 2 + 1);
    if (units == NULL) return PyErr_NoMemory();
    for (uint64_t k = 0; k < n; k++) {
        uint64_t unit;
        if (leb128(ctx, &o, &unit) < 0 || unit > 0xFFFF) {
            PyMem_Free(units);
            return short_read(o);
        }
        units[2 * k] = (unsigned char)(unit >> 8);
        units[2 * k + 1] = (unsigned char)unit;
    }
    int byteorder = 1;
    PyObject *s = PyUnicode_DecodeUTF16((const char *)units, (Py_ssize_t)n * 2, "surrogatepass", &byteorder);
    PyMem_Free(units);
    if (s != NULL) *off = o;
    return s;
}

static PyObject *call_py(PyObject *decoder, Ctx *ctx, Py_ssize_t *off) {
    PyObject *result = PyObject_CallFunction(decoder, "On", ctx->bufobj, *off);
    if (result == NULL) return NULL;
    if (!PyTuple_Check(result) || PyTuple_GET_SIZE(result) != 2) {
        Py_DECREF(result);
        PyErr_SetString(DecodeError, "a Python decoder returned no (value, offset) pair");
        return NULL;
    }
    Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(result, 1));
    if (end == -1 && PyErr_Occurred()) {
        Py_DECREF(result);
        return NULL;
    }
    PyObject *value = Py_NewRef(PyTuple_GET_ITEM(result, 0));
    Py_DECREF(result);
    *off = end;
    return value;
}

static PyObject *decode_node(Node *node, Ctx *ctx, Py_ssize_t *off);

static inline uint64_t le64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if PY_BIG_ENDIAN
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* b[start:start + length] of a row's bytes, clamped as Python slicing clamps. */
static void clamp(Py_ssize_t size, Py_ssize_t *start, Py_ssize_t *length) {
    if (*start > size) *start = size;
    if (*length > size - *start) *length = size - *start;
}

/* The Table runtime's RowDataSerializer record: i32 size (big-endian), then a BinaryRowData (little-endian slots).
 * The reference (binaryrow.row_codec) is followed slot by slot; a RowKind other than INSERT or a reserved var-part
 * slot of a null field makes a RowDataValue, which the reference builds. */
static PyObject *decode_binary_row(Node *node, Ctx *ctx, Py_ssize_t *off) {
    Py_ssize_t o = *off;
    NEED_BYTES(ctx, o, 4);
    int32_t size = (int32_t)be32(ctx->p + o);
    if (size < 0 || size > ctx->size - o - 4) return short_read(o);
    const unsigned char *b = ctx->p + o + 4;
    Py_ssize_t arity = node->param;
    Py_ssize_t header = ((arity + 63 + 8) / 64) * 8;
    if (size < header + 8 * arity) return short_read(o);
    if (b[0]) return call_py(node->fallback, ctx, off);  /* a RowKind */
    PyObject *rowbytes = NULL;  /* the row's own bytes, made once for the reference's slot readers */
    PyObject *result = PyTuple_New(arity);
    if (result == NULL) return NULL;
    for (Py_ssize_t i = 0; i < arity; i++) {
        Py_ssize_t slot = header + 8 * i;
        const unsigned char *q = b + slot;
        int kind = node->slots[i];
        PyObject *value;
        if ((b[(i + 8) >> 3] & (1 << ((i + 8) & 7))) || kind == S_NULL) {
            if (node->reserve[i] && le64(q) != 0) {  /* reserved var-part space: a RowDataValue */
                Py_DECREF(result);
                Py_XDECREF(rowbytes);
                return call_py(node->fallback, ctx, off);
            }
            value = Py_NewRef(Py_None);
        } else {
            switch (kind) {
            case S_BOOL: value = Py_NewRef(q[0] ? Py_True : Py_False); break;
            case S_I8: value = PyLong_FromLong((long)(int8_t)q[0]); break;
            case S_I16: value = PyLong_FromLong((long)(int16_t)((uint16_t)q[0] | ((uint16_t)q[1] << 8))); break;
            case S_I32: value = PyLong_FromLong((long)(int32_t)((uint32_t)le64(q))); break;
            case S_I64: value = PyLong_FromLongLong((long long)(int64_t)le64(q)); break;
            case S_F32: {
                double v = PyFloat_Unpack4((const char *)q, 1);
                value = (v == -1.0 && PyErr_Occurred()) ? NULL : PyFloat_FromDouble(v);
                break;
            }
            case S_F64: {
                double v = PyFloat_Unpack8((const char *)q, 1);
                value = (v == -1.0 && PyErr_Occurred()) ? NULL : PyFloat_FromDouble(v);
                break;
            }
            case S_TEXT: case S_BYTES: {
                int64_t v = (int64_t)le64(q);
                Py_ssize_t start, length;
                if (v < 0) {  /* the mark bit: at most 7 bytes in the slot itself */
                    start = slot;
                    length = (Py_ssize_t)((v >> 56) & 0x7F);
                } else {
                    start = (Py_ssize_t)(v >> 32);
                    length = (Py_ssize_t)(v & 0xFFFFFFFF);
                }
                clamp(size, &start, &length);
                value = kind == S_TEXT ? PyUnicode_DecodeUTF8((const char *)b + start, length, "surrogateescape")
                                       : PyBytes_FromStringAndSize((const char *)b + start, length);
                break;
            }
            default: {  /* S_PY: the reference's slot reader, on the row's own bytes */
                if (rowbytes == NULL) {
                    rowbytes = PyBytes_FromStringAndSize((const char *)b, size);
                    if (rowbytes == NULL) {
                        Py_DECREF(result);
                        return NULL;
                    }
                }
                value = PyObject_CallFunction(node->readers[i], "Oin", rowbytes, 0, slot);
            }
            }
            if (value == NULL) {
                Py_DECREF(result);
                Py_XDECREF(rowbytes);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(result, i, value);
    }
    Py_XDECREF(rowbytes);
    *off = o + 4 + size;
    return result;
}

static PyObject *decode_node(Node *node, Ctx *ctx, Py_ssize_t *off) {
    Py_ssize_t o = *off;
    const unsigned char *p = ctx->p;
    PyObject *result;
    switch (node->kind) {
    case K_LONG:
        NEED_BYTES(ctx, o, 8);
        *off = o + 8;
        return PyLong_FromLongLong((long long)(int64_t)be64(p + o));
    case K_INT:
        NEED_BYTES(ctx, o, 4);
        *off = o + 4;
        return PyLong_FromLong((long)(int32_t)be32(p + o));
    case K_SHORT:
        NEED_BYTES(ctx, o, 2);
        *off = o + 2;
        return PyLong_FromLong((long)(int16_t)(((uint16_t)p[o] << 8) | p[o + 1]));
    case K_BYTE:
        NEED_BYTES(ctx, o, 1);
        *off = o + 1;
        return PyLong_FromLong((long)(int8_t)p[o]);
    case K_BOOL:
        NEED_BYTES(ctx, o, 1);
        *off = o + 1;
        return Py_NewRef(p[o] ? Py_True : Py_False);
    case K_FLOAT: {
        NEED_BYTES(ctx, o, 4);
        double v = PyFloat_Unpack4((const char *)p + o, 0);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        *off = o + 4;
        return PyFloat_FromDouble(v);
    }
    case K_DOUBLE: {
        NEED_BYTES(ctx, o, 8);
        double v = PyFloat_Unpack8((const char *)p + o, 0);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        *off = o + 8;
        return PyFloat_FromDouble(v);
    }
    case K_CHAR:
        NEED_BYTES(ctx, o, 2);
        *off = o + 2;
        return PyUnicode_FromOrdinal(((int)p[o] << 8) | p[o + 1]);
    case K_STRING:
        NEED_BYTES(ctx, o, 1);
        return decode_string(ctx, off);
    case K_CONST:
        *off = o + node->param;
        return Py_NewRef(node->obj);
    case K_POJO: {
        NEED_BYTES(ctx, o, 1);
        unsigned char flags = p[o];
        if (flags == 2) {  /* NO_SUBCLASS: one null byte per field, then the field */
            o += 1;
            result = PyDict_New();
            if (result == NULL) return NULL;
            for (Py_ssize_t i = 0; i < node->n; i++) {
                PyObject *name = PyTuple_GET_ITEM(node->obj, i);
                PyObject *value;
                if (o >= ctx->size) {
                    Py_DECREF(result);
                    return short_read(o);
                }
                if (p[o]) {
                    value = Py_NewRef(Py_None);
                    o += 1;
                } else {
                    o += 1;
                    value = decode_node(node->children[i], ctx, &o);
                    if (value == NULL) {
                        Py_DECREF(result);
                        return NULL;
                    }
                }
                int rc = PyDict_SetItem(result, name, value);
                Py_DECREF(value);
                if (rc < 0) {
                    Py_DECREF(result);
                    return NULL;
                }
            }
            *off = o;
            return result;
        }
        if (flags & 1) {
            *off = o + 1;
            Py_RETURN_NONE;
        }
        return call_py(node->fallback, ctx, off);  /* subclasses: rare, the reference decodes them */
    }
    case K_TUPLE: {
        result = PyTuple_New(node->n);
        if (result == NULL) return NULL;
        for (Py_ssize_t i = 0; i < node->n; i++) {
            PyObject *value = decode_node(node->children[i], ctx, &o);
            if (value == NULL) {
                Py_DECREF(result);
                return NULL;
            }
            PyTuple_SET_ITEM(result, i, value);
        }
        *off = o;
        return result;
    }
    case K_ROW: {
        Py_ssize_t shift = node->param ? 2 : 0;
        Py_ssize_t mask_bytes = (shift + node->n + 7) / 8;
        NEED_BYTES(ctx, o, mask_bytes);
        const unsigned char *mask = p + o;
        if (node->param && (((mask[0] >> 7) & 1) | ((mask[0] >> 5) & 2)) != 0) {
            return call_py(node->fallback, ctx, off);  /* a RowKind other than INSERT: a KindedRow */
        }
        o += mask_bytes;
        result = PyTuple_New(node->n);
        if (result == NULL) return NULL;
        for (Py_ssize_t i = 0; i < node->n; i++) {
            Py_ssize_t bit = shift + i;
            PyObject *value;
            if (mask[bit / 8] & (0x80 >> (bit % 8))) {
                value = Py_NewRef(Py_None);
            } else {
                value = decode_node(node->children[i], ctx, &o);
                if (value == NULL) {
                    Py_DECREF(result);
                    return NULL;
                }
            }
            PyTuple_SET_ITEM(result, i, value);
        }
        *off = o;
        return result;
    }
    case K_LIST: {
        NEED_BYTES(ctx, o, 4);
        int32_t n = (int32_t)be32(p + o);
        o += 4;
        if (n < 0) n = 0;
        if (n > ctx->size - o) return short_read(o);  /* a cheap sanity bound before allocating: Void elements
                                                         take no bytes but never come in such numbers */
        result = PyList_New(n);
        if (result == NULL) return NULL;
        for (int32_t i = 0; i < n; i++) {
            PyObject *value = decode_node(node->children[0], ctx, &o);
            if (value == NULL) {
                Py_DECREF(result);
                return NULL;
            }
            PyList_SET_ITEM(result, i, value);
        }
        *off = o;
        return result;
    }
    case K_MAP: {
        NEED_BYTES(ctx, o, 4);
        int32_t n = (int32_t)be32(p + o);
        o += 4;
        result = PyDict_New();
        if (result == NULL) return NULL;
        for (int32_t i = 0; i < n; i++) {
            PyObject *key = decode_node(node->children[0], ctx, &o);
            if (key == NULL) {
                Py_DECREF(result);
                return NULL;
            }
            PyObject *value;
            if (o >= ctx->size) {
                Py_DECREF(key);
                Py_DECREF(result);
                return short_read(o);
            }
            if (p[o]) {
                value = Py_NewRef(Py_None);
                o += 1;
            } else {
                o += 1;
                value = decode_node(node->children[1], ctx, &o);
                if (value == NULL) {
                    Py_DECREF(key);
                    Py_DECREF(result);
                    return NULL;
                }
            }
            int rc = PyDict_SetItem(result, key, value);
            Py_DECREF(key);
            Py_DECREF(value);
            if (rc < 0) {
                Py_DECREF(result);
                return NULL;
            }
        }
        *off = o;
        return result;
    }
    case K_NULLABLE:
        NEED_BYTES(ctx, o, 1);
        if (p[o]) {
            *off = o + 1 + node->param;
            Py_RETURN_NONE;
        }
        *off = o + 1;
        return decode_node(node->children[0], ctx, off);
    case K_PY:
        return call_py(node->obj, ctx, off);
    case K_BROW:
        return decode_binary_row(node, ctx, off);
    }
    PyErr_SetString(DecodeError, "bad node");
    return NULL;
}

/* -- Codec: one compiled serializer ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Node *root;
} CodecObject;

static PyTypeObject CodecType;

static int Codec_init(CodecObject *self, PyObject *args, PyObject *kwds) {
    PyObject *spec;
    if (!PyArg_ParseTuple(args, "O", &spec)) return -1;
    node_free(self->root);
    self->root = node_compile(spec);
    return self->root == NULL ? -1 : 0;
}

static void Codec_dealloc(CodecObject *self) {
    node_free(self->root);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ctx_from(Ctx *ctx, PyObject *buf) {
    if (!PyBytes_Check(buf)) {
        PyErr_SetString(PyExc_TypeError, "the compiled decoders read bytes");
        return -1;
    }
    ctx->bufobj = buf;
    ctx->p = (const unsigned char *)PyBytes_AS_STRING(buf);
    ctx->size = PyBytes_GET_SIZE(buf);
    return 0;
}

/* codec(buf, off) -> (value, new offset), the reference decoders' signature. */
static PyObject *Codec_call(CodecObject *self, PyObject *args, PyObject *kwds) {
    PyObject *buf;
    Py_ssize_t off;
    Ctx ctx;
    if (!PyArg_ParseTuple(args, "On", &buf, &off)) return NULL;
    if (self->root == NULL) {
        PyErr_SetString(PyExc_ValueError, "codec not compiled");
        return NULL;
    }
    if (ctx_from(&ctx, buf) < 0) return NULL;
    PyObject *value = decode_node(self->root, &ctx, &off);
    if (value == NULL) return NULL;
    return Py_BuildValue("(Nn)", value, off);
}

static PyTypeObject CodecType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flinkstate._speedups._cdecode.Codec",
    .tp_basicsize = sizeof(CodecObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A serializer's record decoder compiled from a spec: codec(buf, off) -> (value, offset).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Codec_init,
    .tp_dealloc = (destructor)Codec_dealloc,
    .tp_call = (ternaryfunc)Codec_call,
};

/* -- Encoding: the same codec trees, written back -------------------------------------------------------------- */

/* Appends n bytes to a bytearray. */
static int put(PyObject *out, const void *data, Py_ssize_t n) {
    Py_ssize_t len = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, len + n) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(out) + len, data, (size_t)n);
    return 0;
}

static int put_byte(PyObject *out, unsigned char b) { return put(out, &b, 1); }

static int put_be(PyObject *out, uint64_t v, int n) {
    unsigned char b[8];
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * (n - 1 - i)));
    return put(out, b, n);
}

static int put_leb128(PyObject *out, uint64_t v) {
    unsigned char b[10];
    int n = 0;
    while (v >= 0x80) {
        b[n++] = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    b[n++] = (unsigned char)v;
    return put(out, b, n);
}

/* A value the compiled encoder does not take as the reference would (another type, out of range): the caller
 * rolls back and lets the reference encode the whole value (or raise its own error). */
static int refuse(void) {
    PyErr_SetString(DecodeError, "value left to the reference encoder");
    return -1;
}

static int encode_string(PyObject *value, PyObject *out) {
    if (value == Py_None) return put_byte(out, 0);
    if (!PyUnicode_CheckExact(value) || PyUnicode_READY(value) < 0) return refuse();
    if (PyUnicode_IS_ASCII(value)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(value);
        if (put_leb128(out, (uint64_t)n + 1) < 0) return -1;
        return put(out, PyUnicode_DATA(value), n);
    }
    PyObject *units = PyUnicode_AsEncodedString(value, "utf-16-be", "surrogatepass");
    if (units == NULL) return -1;
    const unsigned char *u = (const unsigned char *)PyBytes_AS_STRING(units);
    Py_ssize_t n = PyBytes_GET_SIZE(units) / 2;
    int rc = put_leb128(out, (uint64_t)n + 1);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) rc = put_leb128(out, ((uint64_t)u[2 * i] << 8) | u[2 * i + 1]);
    Py_DECREF(units);
    return rc;
}

static int encode_node(Node *node, PyObject *value, PyObject *out) {
    switch (node->kind) {
    case K_LONG: case K_INT: case K_SHORT: case K_BYTE: {
        if (!PyLong_CheckExact(value)) return refuse();
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) return refuse();
        int width = node->kind == K_LONG ? 8 : node->kind == K_INT ? 4 : node->kind == K_SHORT ? 2 : 1;
        if (width < 8) {
            long long bound = 1LL << (8 * width - 1);
            if (v < -bound || v >= bound) return refuse();
        }
        return put_be(out, (uint64_t)v, width);
    }
    case K_BOOL: {
        int truth = PyObject_IsTrue(value);  /* the reference writes `1 if value else 0` */
        if (truth < 0) return -1;
        return put_byte(out, truth ? 1 : 0);
    }
    case K_FLOAT: case K_DOUBLE: {
        if (!PyFloat_CheckExact(value)) return refuse();
        double v = PyFloat_AS_DOUBLE(value);
        unsigned char b[8];
        if (v != v) v = Py_NAN;  /* Java's canonical NaN, as the reference writes it */
        if (node->kind == K_FLOAT ? PyFloat_Pack4(v, (char *)b, 0) : PyFloat_Pack8(v, (char *)b, 0)) return -1;
        return put(out, b, node->kind == K_FLOAT ? 4 : 8);
    }
    case K_CHAR: {
        if (!PyUnicode_CheckExact(value) || PyUnicode_GET_LENGTH(value) != 1) return refuse();
        Py_UCS4 c = PyUnicode_READ_CHAR(value, 0);
        if (c > 0xFFFF) return refuse();
        return put_be(out, c, 2);
    }
    case K_STRING:
        return encode_string(value, out);
    case K_CONST:
        for (Py_ssize_t i = 0; i < node->param; i++)
            if (put_byte(out, 0) < 0) return -1;
        return 0;
    case K_POJO: {
        if (value == Py_None) return put_byte(out, 1);
        if (!PyDict_CheckExact(value)) return refuse();
        PyObject *subclass = PyDict_GetItemString(value, "@class");
        if (subclass != NULL && subclass != Py_None) return refuse();
        if (put_byte(out, 2) < 0) return -1;
        for (Py_ssize_t i = 0; i < node->n; i++) {
            PyObject *item = PyDict_GetItemWithError(value, PyTuple_GET_ITEM(node->obj, i));
            if (item == NULL && PyErr_Occurred()) return -1;
            if (item == NULL || item == Py_None) {
                if (put_byte(out, 1) < 0) return -1;
            } else if (put_byte(out, 0) < 0 || encode_node(node->children[i], item, out) < 0) {
                return -1;
            }
        }
        return 0;
    }
    case K_TUPLE:
        if (!PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) != node->n) return refuse();
        for (Py_ssize_t i = 0; i < node->n; i++)
            if (encode_node(node->children[i], PyTuple_GET_ITEM(value, i), out) < 0) return -1;
        return 0;
    case K_LIST: {
        if (!PyList_CheckExact(value) || PyList_GET_SIZE(value) > INT32_MAX) return refuse();
        Py_ssize_t n = PyList_GET_SIZE(value);
        if (put_be(out, (uint64_t)n, 4) < 0) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyList_GET_SIZE(value) != n) return refuse();  /* changed under us by a Python encoder */
            if (encode_node(node->children[0], PyList_GET_ITEM(value, i), out) < 0) return -1;
        }
        return 0;
    }
    case K_MAP: {
        if (!PyDict_CheckExact(value) || PyDict_GET_SIZE(value) > INT32_MAX) return refuse();
        if (put_be(out, (uint64_t)PyDict_GET_SIZE(value), 4) < 0) return -1;
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(value, &pos, &key, &item)) {
            if (encode_node(node->children[0], key, out) < 0) return -1;
            if (item == Py_None) {
                if (put_byte(out, 1) < 0) return -1;
            } else if (put_byte(out, 0) < 0 || encode_node(node->children[1], item, out) < 0) {
                return -1;
            }
        }
        return 0;
    }
    case K_NULLABLE:
        if (value == Py_None) {
            if (put_byte(out, 1) < 0) return -1;
            for (Py_ssize_t i = 0; i < node->param; i++)
                if (put_byte(out, 0) < 0) return -1;
            return 0;
        }
        if (put_byte(out, 0) < 0) return -1;
        return encode_node(node->children[0], value, out);
    case K_PY: {  /* the reference's own encoder */
        PyObject *result = PyObject_CallFunctionObjArgs(node->obj, value, out, NULL);
        if (result == NULL) return -1;
        Py_DECREF(result);
        return 0;
    }
    }
    return refuse();  /* ROW and RowData are encoded by the reference (the spec builder does not ask for them) */
}

/* Encoder(spec, reference)(value, out): appends the value's bytes to the bytearray ``out``, exactly as the reference
 * encoder does; anything it does not take is rolled back and encoded (or refused) by the reference. */
typedef struct {
    PyObject_HEAD
    Node *root;
    PyObject *reference;
} EncoderObject;

static int Encoder_init(EncoderObject *self, PyObject *args, PyObject *kwds) {
    PyObject *spec, *reference;
    if (!PyArg_ParseTuple(args, "OO", &spec, &reference)) return -1;
    node_free(self->root);
    self->root = node_compile(spec);
    if (self->root == NULL) return -1;
    Py_XSETREF(self->reference, Py_NewRef(reference));
    return 0;
}

static void Encoder_dealloc(EncoderObject *self) {
    node_free(self->root);
    Py_XDECREF(self->reference);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Encoder_call(EncoderObject *self, PyObject *args, PyObject *kwds) {
    PyObject *value, *out;
    if (!PyArg_ParseTuple(args, "OO", &value, &out)) return NULL;
    if (self->root == NULL || self->reference == NULL) {
        PyErr_SetString(PyExc_ValueError, "encoder not compiled");
        return NULL;
    }
    if (PyByteArray_CheckExact(out)) {
        Py_ssize_t start = PyByteArray_GET_SIZE(out);
        if (encode_node(self->root, value, out) == 0) Py_RETURN_NONE;
        PyErr_Clear();
        if (PyByteArray_Resize(out, start) < 0) return NULL;
    }
    return PyObject_Call(self->reference, args, NULL);
}

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flinkstate._speedups._cdecode.Encoder",
    .tp_basicsize = sizeof(EncoderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Encoder(spec, reference)(value, out): a serializer's record encoder, compiled; the reference encodes "
              "what it does not take.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Encoder_init,
    .tp_dealloc = (destructor)Encoder_dealloc,
    .tp_call = (ternaryfunc)Encoder_call,
};

/* -- EntryDecoder: one state's entries ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    int kind;
    int prefix;
    int ambiguous;
    CodecObject *key;
    CodecObject *ns;
    CodecObject *value;     /* E_VALUE, E_LIST, E_MAP */
    CodecObject *user_key;  /* E_MAP */
    PyObject *fallback;     /* the reference entry decoder: its errors are the errors */
} EntryObject;

static PyTypeObject EntryType;

static int Entry_init(EntryObject *self, PyObject *args, PyObject *kwds) {
    PyObject *key, *ns, *value, *user_key, *fallback;
    if (!PyArg_ParseTuple(args, "iipO!O!OOO", &self->kind, &self->prefix, &self->ambiguous, &CodecType, &key,
                          &CodecType, &ns, &value, &user_key, &fallback))
        return -1;
    if (self->kind < E_VALUE || self->kind > E_TIMER) {
        PyErr_SetString(PyExc_ValueError, "bad entry kind");
        return -1;
    }
    if ((self->kind != E_TIMER && !PyObject_TypeCheck(value, &CodecType)) ||
        (self->kind == E_MAP && !PyObject_TypeCheck(user_key, &CodecType))) {
        PyErr_SetString(PyExc_TypeError, "value (and, for MAP, user key) codecs needed");
        return -1;
    }
    Py_XSETREF(self->key, (CodecObject *)Py_NewRef(key));
    Py_XSETREF(self->ns, (CodecObject *)Py_NewRef(ns));
    Py_XSETREF(self->value, PyObject_TypeCheck(value, &CodecType) ? (CodecObject *)Py_NewRef(value) : NULL);
    Py_XSETREF(self->user_key,
               PyObject_TypeCheck(user_key, &CodecType) ? (CodecObject *)Py_NewRef(user_key) : NULL);
    Py_XSETREF(self->fallback, Py_NewRef(fallback));
    return 0;
}

static void Entry_dealloc(EntryObject *self) {
    Py_XDECREF(self->key);
    Py_XDECREF(self->ns);
    Py_XDECREF(self->value);
    Py_XDECREF(self->user_key);
    Py_XDECREF(self->fallback);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline Py_ssize_t varint_le_size(Py_ssize_t v) {
    Py_ssize_t n = 1;
    while (v >= 256) {
        v >>= 8;
        n++;
    }
    return n;
}

static PyObject *end_mismatch(void) {
    PyErr_SetString(DecodeError, "decoded length differs from the stored one");
    return NULL;
}

/* One entry as the reference's make_entry_decoder returns it, its key at ks..ke of ``ctx`` and its value at vs..ve
 * of ``vctx`` (the same buffer in a canonical block; a native RocksDB snapshot's key and value are two); NULL with
 * an exception on any failure. */
static PyObject *decode_entry_in(EntryObject *self, Ctx *ctx, Py_ssize_t ks, Py_ssize_t ke, Ctx *vctx,
                                 Py_ssize_t vs, Py_ssize_t ve) {
    Py_ssize_t o = ks + self->prefix;
    PyObject *key, *ns, *third = NULL, *fourth = NULL;
    if (self->kind == E_TIMER) {
        if (o < 0 || 8 > ctx->size - o) return short_read(o);
        long long ts = (long long)(int64_t)(be64(ctx->p + o) ^ 0x8000000000000000ULL);
        o += 8;
        key = decode_node(self->key->root, ctx, &o);
        if (key == NULL) return NULL;
        ns = decode_node(self->ns->root, ctx, &o);
        if (ns == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        if (o != ke) {
            Py_DECREF(key);
            Py_DECREF(ns);
            return end_mismatch();
        }
        third = PyLong_FromLongLong(ts);
        if (third == NULL) goto fail2;
        goto triple;
    }
    Py_ssize_t start = o;
    key = decode_node(self->key->root, ctx, &o);
    if (key == NULL) return NULL;
    if (self->ambiguous) o += varint_le_size(o - start);
    Py_ssize_t ns_start = o;
    ns = decode_node(self->ns->root, ctx, &o);
    if (ns == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    if (self->ambiguous) o += varint_le_size(o - ns_start);
    if (self->kind == E_VALUE) {
        Py_ssize_t v = vs;
        third = decode_node(self->value->root, vctx, &v);
        if (third == NULL) goto fail2;
        if (v != ve) {
            end_mismatch();
            goto fail3;
        }
    } else if (self->kind == E_LIST) {
        third = PyList_New(0);
        if (third == NULL) goto fail2;
        Py_ssize_t v = vs;
        while (v < ve) {
            PyObject *item = decode_node(self->value->root, vctx, &v);
            if (item == NULL) goto fail3;
            int rc = PyList_Append(third, item);
            Py_DECREF(item);
            if (rc < 0) goto fail3;
            if (v < ve) {
                if (vctx->p[v] != 0x2C) {  /* ListDelimitedSerializer's ',' */
                    end_mismatch();
                    goto fail3;
                }
                v += 1;
            }
        }
        if (v != ve) {
            end_mismatch();
            goto fail3;
        }
    } else {  /* E_MAP */
        third = decode_node(self->user_key->root, ctx, &o);
        if (third == NULL) goto fail2;
        if (o != ke || vs >= vctx->size) {
            end_mismatch();
            goto fail3;
        }
        if (vctx->p[vs]) {
            fourth = Py_NewRef(Py_None);
        } else {
            Py_ssize_t v = vs + 1;
            fourth = decode_node(self->value->root, vctx, &v);
            if (fourth == NULL) goto fail3;
            if (v != ve) {
                Py_DECREF(fourth);
                end_mismatch();
                goto fail3;
            }
        }
        PyObject *entry = PyTuple_New(4);
        if (entry == NULL) {
            Py_DECREF(fourth);
            goto fail3;
        }
        PyTuple_SET_ITEM(entry, 0, key);
        PyTuple_SET_ITEM(entry, 1, ns);
        PyTuple_SET_ITEM(entry, 2, third);
        PyTuple_SET_ITEM(entry, 3, fourth);
        return entry;
    }
triple:
    {
        PyObject *entry = PyTuple_New(3);
        if (entry == NULL) goto fail3;
        PyTuple_SET_ITEM(entry, 0, key);
        PyTuple_SET_ITEM(entry, 1, ns);
        PyTuple_SET_ITEM(entry, 2, third);
        return entry;
    }
fail3:
    Py_DECREF(third);
fail2:
    Py_DECREF(key);
    Py_DECREF(ns);
    return NULL;
}

/* One entry of one buffer (a canonical block's, or the reference's key + value). */
static PyObject *decode_entry(EntryObject *self, Ctx *ctx, Py_ssize_t ks, Py_ssize_t ke, Py_ssize_t vs,
                              Py_ssize_t ve) {
    return decode_entry_in(self, ctx, ks, ke, ctx, vs, ve);
}

/* entry(buf, ks, ke, vs, ve) -> entry tuple: the reference's signature; any failure is the reference's to report. */
static PyObject *Entry_call(EntryObject *self, PyObject *args, PyObject *kwds) {
    PyObject *buf;
    Py_ssize_t ks, ke, vs, ve;
    Ctx ctx;
    if (!PyArg_ParseTuple(args, "Onnnn", &buf, &ks, &ke, &vs, &ve)) return NULL;
    if (PyBytes_Check(buf)) {
        ctx_from(&ctx, buf);
        PyObject *entry = decode_entry(self, &ctx, ks, ke, vs, ve);
        if (entry != NULL) return entry;
        PyErr_Clear();
    }
    return PyObject_Call(self->fallback, args, NULL);
}

static PyObject *block_error(const char *what, Py_ssize_t offset) {
    PyErr_Format(DecodeError, "%s at %zd", what, offset);
    return NULL;
}

/* -- the one walk of a canonical key-group block ------------------------------------------------------------------ */

/* Flink's full-snapshot layout (FullSnapshotAsyncWriter; flinkstate/format/key_group_block.py walks it in Python):
 * u16 state id, then entries (i32 key length, key, i32 value length, value), the first key byte of a state's last
 * entry flagged (0x80) and followed by the next u16 state id, 0xFFFF ending the block. Every compiled function
 * that walks a block does it with walk_start / walk_next and adds only its own action per entry, so they all
 * accept and refuse the same blocks at the same offsets. */

#if defined(__GNUC__)
#define WALK_INLINE static inline __attribute__((always_inline))  /* each caller's loop compiled as one */
#define WALK_COLD static __attribute__((cold, noinline))
#else
#define WALK_INLINE static inline
#define WALK_COLD static
#endif

/* What came before the next entry: a state id, an entry of the same run, or the last entry of a run (its key
 * flagged: the next state id or the end mark follows). */
enum { AFTER_STATE_ID = 0, AFTER_ENTRY = 1, AFTER_RUN = 2 };

typedef struct {
    const unsigned char *p;
    Py_ssize_t size;
    Py_ssize_t pos;          /* where the walk is: the next entry's key length, or the next state id after a run */
    Py_ssize_t state_id;     /* the state of the next entry */
    Py_ssize_t state_limit;  /* every state id must be below it (PY_SSIZE_T_MAX: unchecked) */
    Py_ssize_t key_group;    /* every key's key-group prefix, when check_group */
    int check_group;
    int prefix_bytes;        /* 2: a two-byte key-group prefix, else one byte */
    int detailed;            /* errors say what is wrong where (scan_block); else "malformed block" at pos */
    int after;
} BlockWalk;

typedef struct {
    Py_ssize_t state_id;
    Py_ssize_t start;        /* its key length's offset */
    Py_ssize_t ks, ke, vs, ve;
    int last;                /* the last entry of its state's run: its first key byte carries the 0x80 flag */
} BlockEntry;

/* The walk's refusal, in the caller's style: what and where (``offset``), or "malformed block" at ``pos``. */
WALK_COLD void walk_error(int detailed, const char *what, Py_ssize_t offset, Py_ssize_t pos) {
    if (detailed) block_error(what, offset);
    else block_error("malformed block", pos);
}

/* walk_next's refusals: -1 in walk_next itself, so the compiler sees that no entry is returned with it. */
#define WALK_REFUSE(what, offset, pos) do { walk_error(w->detailed, (what), (offset), (pos)); return -1; } while (0)

/* Starts a walk of ``data`` (bytes): state ids must be below ``state_limit`` (a negative one refuses every block;
 * PY_SSIZE_T_MAX checks none), key-group prefixes must be ``key_group`` when ``check_group``. 0, or -1 with
 * DecodeError set when the block has no first state id or a bad one. */
static int walk_start(BlockWalk *w, PyObject *data, Py_ssize_t state_limit, Py_ssize_t key_group, int check_group,
                      int prefix_bytes, int detailed) {
    w->p = (const unsigned char *)PyBytes_AS_STRING(data);
    w->size = PyBytes_GET_SIZE(data);
    w->pos = 2;
    w->state_limit = state_limit;
    w->key_group = key_group;
    w->check_group = check_group;
    w->prefix_bytes = prefix_bytes;
    w->detailed = detailed;
    w->after = AFTER_STATE_ID;
    if (w->size < 2) {
        block_error("empty key-group block", 0);
        return -1;
    }
    w->state_id = ((Py_ssize_t)w->p[0] << 8) | w->p[1];
    if (w->state_id >= state_limit) {
        block_error("bad state id", 0);
        return -1;
    }
    return 0;
}

/* The next entry into ``e``: 1; 0 at the end-of-key-group mark, which must end the block (w->pos is then its size);
 * -1 with DecodeError set on a bad length, key-group prefix or state id, or a block that ends without the mark. */
WALK_INLINE int walk_next(BlockWalk *w, BlockEntry *e) {
    const unsigned char *p = w->p;
    Py_ssize_t size = w->size, pos = w->pos;
    if (w->after == AFTER_RUN) {
        if (pos + 2 > size) WALK_REFUSE("missing state id", pos, pos);
        Py_ssize_t state_id = ((Py_ssize_t)p[pos] << 8) | p[pos + 1];
        pos += 2;
        w->pos = pos;
        if (state_id == 0xFFFF) {
            if (pos != size) WALK_REFUSE("bytes after the end-of-key-group mark", pos, pos);
            return 0;
        }
        if (state_id >= w->state_limit) WALK_REFUSE("bad state id", pos - 2, pos);
        w->state_id = state_id;
    } else if (w->after == AFTER_ENTRY && pos >= size) {
        WALK_REFUSE("no end-of-key-group mark", pos, pos);
    }
    if (pos + 4 > size) WALK_REFUSE("bad key length", pos, pos);
    int32_t key_len = (int32_t)be32(p + pos);
    Py_ssize_t ks = pos + 4, ke = ks + key_len;
    if (key_len <= 0 || ke + 4 > size) WALK_REFUSE("bad key length", pos, pos);
    int32_t value_len = (int32_t)be32(p + ke);
    Py_ssize_t vs = ke + 4, ve = vs + value_len;
    w->pos = ve;  /* the offset the undetailed errors name from here on, as before this walk was shared */
    if (value_len < 0 || ve > size) WALK_REFUSE("bad value length", ke, ve);
    unsigned char first = p[ks];
    if (w->check_group) {
        Py_ssize_t group = w->prefix_bytes == 2 ? (((Py_ssize_t)(first & 0x7F) << 8) | p[ks + 1])
                                                : (Py_ssize_t)(first & 0x7F);
        if (group != w->key_group) WALK_REFUSE("entry of another key group", ks, ve);
    }
    e->state_id = w->state_id;
    e->start = pos;
    e->ks = ks;
    e->ke = ke;
    e->vs = vs;
    e->ve = ve;
    e->last = (first & 0x80) != 0;
    w->after = e->last ? AFTER_RUN : AFTER_ENTRY;
    return 1;
}

#undef WALK_REFUSE

/* scan_block(data, key_group, wanted, state_count, prefix_bytes, entries) -> end offset: the reference's
 * KeyedStateStream._scan_block in one pass, appending the decoded entries of state ``wanted`` to ``entries``. */
static PyObject *Entry_scan_block(EntryObject *self, PyObject *args) {
    PyObject *data, *entries;
    Py_ssize_t key_group, wanted, state_count;
    int prefix_bytes;
    Ctx ctx;
    BlockWalk walk;
    BlockEntry e;
    int rc;
    if (!PyArg_ParseTuple(args, "O!nnniO!", &PyBytes_Type, &data, &key_group, &wanted, &state_count, &prefix_bytes,
                          &PyList_Type, &entries))
        return NULL;
    ctx_from(&ctx, data);
    if (walk_start(&walk, data, state_count, key_group, 1, prefix_bytes, 1) < 0) return NULL;
    while ((rc = walk_next(&walk, &e)) > 0) {
        if (e.state_id != wanted) continue;
        PyObject *entry = decode_entry(self, &ctx, e.ks, e.ke, e.vs, e.ve);
        if (entry == NULL) return NULL;
        rc = PyList_Append(entries, entry);
        Py_DECREF(entry);
        if (rc < 0) return NULL;
    }
    return rc < 0 ? NULL : PyLong_FromSsize_t(walk.pos);
}

/* -- a native RocksDB snapshot's entries: (key, value) pairs as RocksDB's iterator gives them ---------------------- */

/* A pair's key and value (new references), checked to be a (bytes, bytes) tuple; -1 with TypeError if not. */
static int native_pair(PyObject *pair, PyObject **key, PyObject **value) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) ||
        !PyBytes_Check(PyTuple_GET_ITEM(pair, 1))) {
        PyErr_SetString(PyExc_TypeError, "native RocksDB entries are (bytes, bytes) pairs");
        return -1;
    }
    *key = PyTuple_GET_ITEM(pair, 0);
    *value = PyTuple_GET_ITEM(pair, 1);
    return 0;
}

/* The key group a RocksDB key starts with (its big-endian prefix), or -1 with ValueError for a shorter key; the
 * reference (rocksdb_native.take_key_group) raises the same error. */
static Py_ssize_t native_key_group(PyObject *key, int prefix_bytes) {
    const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(key);
    Py_ssize_t size = PyBytes_GET_SIZE(key);
    if (size < prefix_bytes) {
        PyErr_Format(PyExc_ValueError, "a key of %zd bytes, shorter than its %d-byte key-group prefix", size,
                     prefix_bytes);
        return -1;
    }
    return prefix_bytes == 2 ? (((Py_ssize_t)k[0] << 8) | k[1]) : (Py_ssize_t)k[0];
}

/* scan_pairs(pairs, first, prefix_bytes, entries) -> the first pair of the next key group, or None at the end:
 * decodes ``first`` and every following (key, value) pair of ``pairs`` (an iterator) in the same key group into
 * ``entries``, each as entry(key + value, 0, len(key), len(key), len(key + value)) decodes it (read in place from
 * the two; on any failure the reference decodes the joined bytes: its failure is the error).
 * rocksdb_native.take_key_group is the reference; one call per key group instead of the Python loop's work per
 * entry. */
static PyObject *Entry_scan_pairs(EntryObject *self, PyObject *args) {
    PyObject *pairs, *pair, *entries, *key, *value;
    int prefix_bytes;
    if (!PyArg_ParseTuple(args, "OOiO!", &pairs, &pair, &prefix_bytes, &PyList_Type, &entries)) return NULL;
    if (native_pair(pair, &key, &value) < 0) return NULL;
    Py_ssize_t key_group = native_key_group(key, prefix_bytes);
    if (key_group < 0) return NULL;
    Py_INCREF(pair);
    for (;;) {
        Ctx key_ctx, value_ctx;
        ctx_from(&key_ctx, key);
        ctx_from(&value_ctx, value);
        PyObject *entry = decode_entry_in(self, &key_ctx, 0, key_ctx.size, &value_ctx, 0, value_ctx.size);
        if (entry == NULL) {  /* the reference decodes key + value, one buffer, or says why not */
            PyErr_Clear();
            PyObject *buf = PyBytes_FromStringAndSize(NULL, key_ctx.size + value_ctx.size);
            if (buf == NULL) goto fail;
            memcpy(PyBytes_AS_STRING(buf), key_ctx.p, key_ctx.size);
            memcpy(PyBytes_AS_STRING(buf) + key_ctx.size, value_ctx.p, value_ctx.size);
            entry = PyObject_CallFunction(self->fallback, "Onnnn", buf, (Py_ssize_t)0, key_ctx.size, key_ctx.size,
                                          key_ctx.size + value_ctx.size);
            Py_DECREF(buf);
        }
        Py_DECREF(pair);
        if (entry == NULL) return NULL;
        int rc = PyList_Append(entries, entry);
        Py_DECREF(entry);
        if (rc < 0) return NULL;
        pair = PyIter_Next(pairs);
        if (pair == NULL) {
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
        if (native_pair(pair, &key, &value) < 0) goto fail;
        Py_ssize_t group = native_key_group(key, prefix_bytes);
        if (group < 0) goto fail;
        if (group != key_group) return pair;
    }
fail:
    Py_DECREF(pair);
    return NULL;
}

/* with the migration's runs, below */
static PyObject *Entry_migrate_block(EntryObject *self, PyObject *args);
static PyObject *Entry_expected_block(EntryObject *self, PyObject *args);
static PyObject *Entry_compare_block(EntryObject *self, PyObject *args);

static PyMethodDef Entry_methods[] = {
    {"migrate_block", (PyCFunction)Entry_migrate_block, METH_VARARGS,
     "migrate_block(data, key_group, wanted, state_count, prefix_bytes, kind, transform, drop, value_enc) -> "
     "the state's run migrated as stored, or None"},
    {"expected_block", (PyCFunction)Entry_expected_block, METH_VARARGS,
     "expected_block(data, key_group, wanted, state_count, prefix_bytes, ambiguous, key_enc, ns_enc, value_enc, "
     "user_key_enc, transform, drop) -> the verifier's expected entries of a source block, or None"},
    {"compare_block", (PyCFunction)Entry_compare_block, METH_VARARGS,
     "compare_block(data, key_group, wanted, state_count, prefix_bytes, expected, reference) -> -1 or an index"},
    {"scan_block", (PyCFunction)Entry_scan_block, METH_VARARGS,
     "scan_block(data, key_group, wanted, state_count, prefix_bytes, entries) -> end offset"},
    {"scan_pairs", (PyCFunction)Entry_scan_pairs, METH_VARARGS,
     "scan_pairs(pairs, first, prefix_bytes, entries) -> the first (key, value) of the next key group, or None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flinkstate._speedups._cdecode.EntryDecoder",
    .tp_basicsize = sizeof(EntryObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "EntryDecoder(kind, prefix_bytes, ambiguous, key, namespace, value, user_key, fallback): one state's "
              "entry decoder; entry(buf, ks, ke, vs, ve) -> tuple, and scan_block(...) for a whole block.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Entry_init,
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_call = (ternaryfunc)Entry_call,
    .tp_methods = Entry_methods,
};

/* How a byte-level walker below checks a block (each keeps the checks it always made): state ids against
 * state_count, key-group prefixes against key_group, always (a negative one refuses every block) or only when the
 * argument is not negative (the Python callers' "not given"). */
enum { CHECK_ALWAYS = 0, CHECK_WHEN_GIVEN = 1 };

/* Parses the byte-level walkers' arguments, (data, state_count, key_group, prefix_bytes), followed by state_id when
 * ``wanted`` is not NULL, and starts the walk of data. 0, or -1 with an exception set. */
static int walk_args(PyObject *args, BlockWalk *walk, PyObject **data, Py_ssize_t *wanted, int states, int groups) {
    Py_ssize_t state_count, key_group;
    int prefix_bytes, ok;
    if (wanted == NULL)
        ok = PyArg_ParseTuple(args, "O!nni", &PyBytes_Type, data, &state_count, &key_group, &prefix_bytes);
    else
        ok = PyArg_ParseTuple(args, "O!nnin", &PyBytes_Type, data, &state_count, &key_group, &prefix_bytes, wanted);
    if (!ok) return -1;
    Py_ssize_t state_limit = states == CHECK_WHEN_GIVEN && state_count < 0 ? PY_SSIZE_T_MAX : state_count;
    int check_group = groups == CHECK_ALWAYS || key_group >= 0;
    return walk_start(walk, *data, state_limit, key_group, check_group, prefix_bytes, 0);
}

/* raw_entries(data, state_count, key_group, prefix_bytes) -> [(state id, ks, ke, vs, ve), ...]: the reference's
 * iter_raw_entries (state ids checked when state_count >= 0) and KeyedStateStream.raw_entries (key groups checked
 * when key_group >= 0), for the whole block at once; DecodeError on anything the reference would refuse. */
static PyObject *raw_entries(PyObject *module, PyObject *args) {
    PyObject *data;
    BlockWalk walk;
    BlockEntry e;
    int rc;
    if (walk_args(args, &walk, &data, NULL, CHECK_WHEN_GIVEN, CHECK_WHEN_GIVEN) < 0) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    while ((rc = walk_next(&walk, &e)) > 0) {
        PyObject *entry = PyTuple_New(5);
        if (entry == NULL) break;
        Py_ssize_t fields[5] = {e.state_id, e.ks, e.ke, e.vs, e.ve};
        for (int i = 0; i < 5; i++) {
            PyObject *number = PyLong_FromSsize_t(fields[i]);
            if (number == NULL) {
                Py_CLEAR(entry);
                break;
            }
            PyTuple_SET_ITEM(entry, i, number);
        }
        if (entry == NULL) break;
        rc = PyList_Append(out, entry);
        Py_DECREF(entry);
        if (rc < 0) break;
    }
    if (rc == 0) return out;
    Py_DECREF(out);
    return NULL;
}

/* raw_pairs(data, state_count, key_group, prefix_bytes, state_id) -> [(key bytes, value bytes), ...] of one state
 * (state_id < 0: all) in a block, the key's "last of its run" flag cleared (keyed_stream.raw_key): the verifier's
 * byte-level view, walked once in C. DecodeError on anything the reference walk would refuse. */
static PyObject *raw_pairs(PyObject *module, PyObject *args) {
    PyObject *data;
    Py_ssize_t wanted;
    BlockWalk walk;
    BlockEntry e;
    int rc;
    if (walk_args(args, &walk, &data, &wanted, CHECK_WHEN_GIVEN, CHECK_WHEN_GIVEN) < 0) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    const char *p = PyBytes_AS_STRING(data);
    while ((rc = walk_next(&walk, &e)) > 0) {
        if (wanted >= 0 && e.state_id != wanted) continue;
        PyObject *key = PyBytes_FromStringAndSize(p + e.ks, e.ke - e.ks);
        if (key == NULL) break;
        PyBytes_AS_STRING(key)[0] &= 0x7F;  /* keyed_stream.raw_key: without the "last of its run" flag */
        PyObject *value = PyBytes_FromStringAndSize(p + e.vs, e.ve - e.vs);
        PyObject *pair = value == NULL ? NULL : PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_XDECREF(value);
            break;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        rc = PyList_Append(out, pair);
        Py_DECREF(pair);
        if (rc < 0) break;
    }
    if (rc == 0) return out;
    Py_DECREF(out);
    return NULL;
}

/* canonical(value, reference) -> the reference's canonical form (flinkstate/migration/canonical.py) of value,
 * built in C for the exact built-in types of decoded values; any other type (subclasses, Decimal, time models,
 * dataclasses) is handed to ``reference`` with its whole subtree. */
static PyObject *N_NONE, *N_BOOL, *N_STR, *N_BYTES, *N_INT, *N_FLOAT, *N_MAP, *N_SEQ, *B_NAN;

static PyObject *canonical_of(PyObject *value, PyObject *reference) {
    PyTypeObject *type = Py_TYPE(value);
    if (value == Py_None) return PyTuple_Pack(2, N_NONE, value);
    if (type == &PyBool_Type) return PyTuple_Pack(2, N_BOOL, value);
    if (type == &PyUnicode_Type) return PyTuple_Pack(2, N_STR, value);
    if (type == &PyBytes_Type) return PyTuple_Pack(2, N_BYTES, value);
    if (type == &PyLong_Type) return PyTuple_Pack(2, N_INT, value);
    if (type == &PyFloat_Type) {
        double v = PyFloat_AS_DOUBLE(value);
        if (v != v) return PyTuple_Pack(2, N_FLOAT, B_NAN);
        char b[8];
        if (PyFloat_Pack8(v, b, 0) < 0) return NULL;
        PyObject *bits = PyBytes_FromStringAndSize(b, 8);
        if (bits == NULL) return NULL;
        PyObject *result = PyTuple_Pack(2, N_FLOAT, bits);
        Py_DECREF(bits);
        return result;
    }
    if (type == &PyList_Type || type == &PyTuple_Type) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
        PyObject *items = PyTuple_New(n);
        if (items == NULL) return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = canonical_of(PySequence_Fast_GET_ITEM(value, i), reference);
            if (item == NULL) {
                Py_DECREF(items);
                return NULL;
            }
            PyTuple_SET_ITEM(items, i, item);
        }
        PyObject *zero = PyLong_FromLong(0);
        PyObject *result = zero == NULL ? NULL : PyTuple_Pack(3, N_SEQ, zero, items);
        Py_XDECREF(zero);
        Py_DECREF(items);
        return result;
    }
    if (type == &PyDict_Type) {
        PyObject *pairs = PyList_New(0);
        if (pairs == NULL) return NULL;
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(value, &pos, &k, &v)) {
            PyObject *ck = canonical_of(k, reference);
            PyObject *cv = ck == NULL ? NULL : canonical_of(v, reference);
            PyObject *pair = cv == NULL ? NULL : PyTuple_Pack(2, ck, cv);
            Py_XDECREF(ck);
            Py_XDECREF(cv);
            if (pair == NULL || PyList_Append(pairs, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(pairs);
                return NULL;
            }
            Py_DECREF(pair);
        }
        if (PyList_Sort(pairs) < 0) {
            Py_DECREF(pairs);
            return NULL;
        }
        PyObject *sorted = PyList_AsTuple(pairs);
        Py_DECREF(pairs);
        if (sorted == NULL) return NULL;
        PyObject *result = PyTuple_Pack(2, N_MAP, sorted);
        Py_DECREF(sorted);
        return result;
    }
    return PyObject_CallOneArg(reference, value);
}

static PyObject *canonical(PyObject *module, PyObject *args) {
    PyObject *value, *reference;
    if (!PyArg_ParseTuple(args, "OO", &value, &reference)) return NULL;
    return canonical_of(value, reference);
}

/* state_span(data, state_count, key_group, prefix_bytes, state_id) -> (start, end, count): the bytes of the
 * entries of one state in a block when they are one run (Flink's full-snapshot writer emits a key group state by
 * state), from the first entry's key length to the last entry's value end, and how many entries; (0, 0, 0) when
 * the state has none; None when its entries are in more than one run. The walk is the shared one (state ids and
 * key groups always checked); DecodeError on anything it refuses. Two kept states are then compared as two byte
 * ranges. */
static PyObject *state_span(PyObject *module, PyObject *args) {
    PyObject *data;
    Py_ssize_t wanted, start = 0, end = 0, count = 0;
    int runs = 0, in_run = 0, rc;
    BlockWalk walk;
    BlockEntry e;
    if (walk_args(args, &walk, &data, &wanted, CHECK_ALWAYS, CHECK_ALWAYS) < 0) return NULL;
    while ((rc = walk_next(&walk, &e)) > 0) {
        if (e.state_id == wanted) {
            if (!in_run) {
                in_run = 1;
                runs++;
                start = e.start;
            }
            end = e.ve;
            count++;
        } else {
            in_run = 0;
        }
        if (e.last) in_run = 0;
    }
    if (rc < 0) return NULL;
    if (runs > 1) Py_RETURN_NONE;
    return Py_BuildValue("(nnn)", start, end, count);
}

/* block_runs(data, state_count, key_group, prefix_bytes) -> [(state_id, start, end, count), ...]: a block's runs of
 * entries in order, each from its first entry's key length to its last entry's value end (the bytes after the run's
 * state id, the last key flagged), and how many entries it holds: what the migration copies as it is for a state
 * whose bytes are kept. The walk is the shared one (state ids when state_count >= 0, key-group prefixes always);
 * DecodeError on anything it refuses. */
static PyObject *block_runs(PyObject *module, PyObject *args) {
    PyObject *data;
    BlockWalk walk;
    BlockEntry e;
    int rc;
    if (walk_args(args, &walk, &data, NULL, CHECK_WHEN_GIVEN, CHECK_ALWAYS) < 0) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Py_ssize_t start = 0, count = 0;
    while ((rc = walk_next(&walk, &e)) > 0) {
        if (count++ == 0) start = e.start;
        if (!e.last) continue;
        PyObject *run = Py_BuildValue("(nnnn)", e.state_id, start, e.ve, count);
        if (run == NULL) break;
        rc = PyList_Append(out, run);
        Py_DECREF(run);
        if (rc < 0) break;
        count = 0;
    }
    if (rc == 0) return out;
    Py_DECREF(out);
    return NULL;
}

/* -- the verifier's block checks ------------------------------------------------------------------------------- */

/* An Encoder's bytes for ``value`` appended to ``out``: its compiled tree, or (what it does not take) its reference,
 * exactly as Encoder.__call__ does. */
static int encode_with(PyObject *encoder, PyObject *value, PyObject *out) {
    EncoderObject *enc = (EncoderObject *)encoder;
    if (enc->root == NULL || enc->reference == NULL) {
        PyErr_SetString(PyExc_ValueError, "encoder not compiled");
        return -1;
    }
    Py_ssize_t start = PyByteArray_GET_SIZE(out);
    if (encode_node(enc->root, value, out) == 0) return 0;
    PyErr_Clear();
    if (PyByteArray_Resize(out, start) < 0) return -1;
    PyObject *result = PyObject_CallFunctionObjArgs(enc->reference, value, out, NULL);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}

static int put_varint_le(PyObject *out, Py_ssize_t v) {
    do {
        if (put_byte(out, (unsigned char)(v & 0xFF)) < 0) return -1;
        v >>= 8;
    } while (v != 0);
    return 0;
}

/* The stored key bytes (without the run flag) of one entry, as migration.rewrite.StateCodec.encode_entry writes
 * them: key-group prefix, key, namespace (each followed by its length when both are of variable length), and for
 * MAP the user key. */
static int encode_key(PyObject *entry, int kind, int prefix_bytes, Py_ssize_t key_group, int ambiguous,
                      PyObject *key_enc, PyObject *ns_enc, PyObject *user_key_enc, PyObject *out) {
    if (prefix_bytes == 2 && put_byte(out, (unsigned char)(key_group >> 8)) < 0) return -1;
    if (put_byte(out, (unsigned char)(key_group & 0xFF)) < 0) return -1;
    Py_ssize_t start = PyByteArray_GET_SIZE(out);
    if (encode_with(key_enc, PyTuple_GET_ITEM(entry, 0), out) < 0) return -1;
    if (ambiguous && put_varint_le(out, PyByteArray_GET_SIZE(out) - start) < 0) return -1;
    start = PyByteArray_GET_SIZE(out);
    if (encode_with(ns_enc, PyTuple_GET_ITEM(entry, 1), out) < 0) return -1;
    if (ambiguous && put_varint_le(out, PyByteArray_GET_SIZE(out) - start) < 0) return -1;
    if (kind == E_MAP && encode_with(user_key_enc, PyTuple_GET_ITEM(entry, 2), out) < 0) return -1;
    return 0;
}

/* The stored value bytes of one entry (StateCodec.encode_value); 1 when nothing would be stored (an empty list). */
static int encode_value(PyObject *entry, int kind, PyObject *value_enc, PyObject *out) {
    if (kind == E_LIST) {
        PyObject *items = PyTuple_GET_ITEM(entry, 2);
        if (!PyList_Check(items)) {
            PyErr_SetString(PyExc_TypeError, "a LIST entry's value is not a list");
            return -1;
        }
        Py_ssize_t n = PyList_GET_SIZE(items);
        if (n == 0) return 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i && put_byte(out, 0x2C) < 0) return -1;
            if (i >= PyList_GET_SIZE(items)) return 1;  /* changed under us by a Python encoder */
            if (encode_with(value_enc, PyList_GET_ITEM(items, i), out) < 0) return -1;
        }
        return 0;
    }
    if (kind == E_MAP) {
        PyObject *value = PyTuple_GET_ITEM(entry, 3);
        if (value == Py_None) return put_byte(out, 1);
        if (put_byte(out, 0) < 0) return -1;
        return encode_with(value_enc, value, out);
    }
    return encode_with(value_enc, PyTuple_GET_ITEM(entry, 2), out);
}

/* Whether ``entry`` (decoded from the block entry ``e`` of ``p``) re-encodes to exactly its stored bytes: 1 yes,
 * 0 no, -1 an error. The key is compared without its "last of its run" flag (keyed_stream.raw_key); ``out`` is
 * scratch space. */
static int reencodes_exactly(PyObject *entry, const BlockEntry *e, const unsigned char *p, int kind, int prefix_bytes,
                             Py_ssize_t key_group, int ambiguous, PyObject *key_enc, PyObject *ns_enc,
                             PyObject *value_enc, PyObject *user_key_enc, PyObject *out) {
    int rc = PyByteArray_Resize(out, 0);
    if (rc == 0) rc = encode_key(entry, kind, prefix_bytes, key_group, ambiguous, key_enc, ns_enc, user_key_enc, out);
    if (rc < 0) return -1;
    const char *got = PyByteArray_AS_STRING(out);
    Py_ssize_t n = PyByteArray_GET_SIZE(out);
    if (n != e->ke - e->ks || (got[0] & 0xFF) != (p[e->ks] & 0x7F) || memcmp(got + 1, p + e->ks + 1, n - 1) != 0)
        return 0;
    rc = PyByteArray_Resize(out, 0);
    if (rc == 0) rc = encode_value(entry, kind, value_enc, out);
    if (rc < 0) return -1;
    return rc == 0 && PyByteArray_GET_SIZE(out) == e->ve - e->vs &&
           memcmp(PyByteArray_AS_STRING(out), p + e->vs, e->ve - e->vs) == 0;
}

/* reencode_check(data, key_group, wanted, state_count, prefix_bytes, entries, kind, ambiguous, key_enc, ns_enc,
 * value_enc, user_key_enc) -> the index of the first entry of state ``wanted`` in the block whose bytes differ from
 * what the encoders make of ``entries`` at that index (the block's decoded entries of that state), or -1 when
 * every one re-encodes exactly and the counts agree. The verifier's exactness check of a whole block in one pass;
 * the walk is the shared one. Raises on a malformed block or an encoder error (the caller reruns the reference). */
static PyObject *reencode_check(PyObject *module, PyObject *args) {
    PyObject *data, *entries, *key_enc, *ns_enc, *value_enc, *user_key_enc;
    Py_ssize_t key_group, wanted, state_count;
    int prefix_bytes, kind, ambiguous;
    BlockWalk walk;
    BlockEntry e;
    int rc;
    if (!PyArg_ParseTuple(args, "O!nnniO!ipOOOO", &PyBytes_Type, &data, &key_group, &wanted, &state_count,
                          &prefix_bytes, &PyList_Type, &entries, &kind, &ambiguous, &key_enc, &ns_enc, &value_enc,
                          &user_key_enc))
        return NULL;
    if (kind < E_VALUE || kind > E_MAP || (prefix_bytes != 1 && prefix_bytes != 2) ||
        !PyObject_TypeCheck(key_enc, &EncoderType) || !PyObject_TypeCheck(ns_enc, &EncoderType) ||
        !PyObject_TypeCheck(value_enc, &EncoderType) ||
        (kind == E_MAP && !PyObject_TypeCheck(user_key_enc, &EncoderType))) {
        PyErr_SetString(PyExc_TypeError, "reencode_check: bad kind, prefix or encoders");
        return NULL;
    }
    if (walk_start(&walk, data, state_count, key_group, 1, prefix_bytes, 0) < 0) return NULL;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t index = 0;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, 0);
    if (out == NULL) return NULL;
    while ((rc = walk_next(&walk, &e)) > 0) {
        if (e.state_id != wanted) continue;
        if (index >= PyList_GET_SIZE(entries)) goto differ;
        PyObject *entry = PyList_GET_ITEM(entries, index);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != (kind == E_MAP ? 4 : 3)) goto differ;
        Py_INCREF(entry);
        rc = reencodes_exactly(entry, &e, p, kind, prefix_bytes, key_group, ambiguous, key_enc, ns_enc, value_enc,
                               user_key_enc, out);
        Py_DECREF(entry);
        if (rc < 0) goto fail;
        if (rc == 0) goto differ;
        index++;
    }
    if (rc < 0) goto fail;
    Py_DECREF(out);
    return PyLong_FromSsize_t(index == PyList_GET_SIZE(entries) ? -1 : index);
differ:
    Py_DECREF(out);
    return PyLong_FromSsize_t(index);
fail:
    Py_DECREF(out);
    return NULL;
}

/* same(a, b, reference) -> 1 when two decoded values are surely equal as Java compares them (the canonical forms
 * of flinkstate/migration/canonical.py equal), 0 when this cannot tell (the caller then compares canonical forms,
 * which decide). Exact built-in types only, compared without building anything: the same type at every node (so
 * 1, True and 1.0 never match), floats by their bits (so -0.0 is not 0.0; NaNs of one payload match), dicts in
 * the same order; any other type is decided by ``reference(a, b)`` (canonical(a) == canonical(b)). */
static int same_of(PyObject *a, PyObject *b, PyObject *reference) {
    if (a == b) return 1;  /* one object: its canonical form equals itself */
    PyTypeObject *type = Py_TYPE(a);
    if (type != Py_TYPE(b)) return 0;
    if (type == &PyLong_Type || type == &PyUnicode_Type || type == &PyBytes_Type)
        return PyObject_RichCompareBool(a, b, Py_EQ);
    if (type == &PyFloat_Type) {
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
        return memcmp(&x, &y, sizeof(double)) == 0;
    }
    if (type == &PyBool_Type || a == Py_None) return 0;  /* singletons: not the same object, so different */
    if (type == &PyList_Type || type == &PyTuple_Type) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
        if (n != PySequence_Fast_GET_SIZE(b)) return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (n != PySequence_Fast_GET_SIZE(a) || n != PySequence_Fast_GET_SIZE(b)) return 0;
            PyObject *x = PySequence_Fast_GET_ITEM(a, i), *y = PySequence_Fast_GET_ITEM(b, i);
            Py_INCREF(x);
            Py_INCREF(y);
            int rc = same_of(x, y, reference);
            Py_DECREF(x);
            Py_DECREF(y);
            if (rc != 1) return rc;
        }
        return 1;
    }
    if (type == &PyDict_Type) {
        if (PyDict_GET_SIZE(a) != PyDict_GET_SIZE(b)) return 0;
        Py_ssize_t pa = 0, pb = 0;
        PyObject *ka, *va, *kb, *vb;
        while (PyDict_Next(a, &pa, &ka, &va)) {
            if (!PyDict_Next(b, &pb, &kb, &vb)) return 0;
            Py_INCREF(ka); Py_INCREF(va); Py_INCREF(kb); Py_INCREF(vb);
            int rc = same_of(ka, kb, reference);
            if (rc == 1) rc = same_of(va, vb, reference);
            Py_DECREF(ka); Py_DECREF(va); Py_DECREF(kb); Py_DECREF(vb);
            if (rc != 1) return rc;
        }
        return 1;
    }
    PyObject *result = PyObject_CallFunctionObjArgs(reference, a, b, NULL);
    if (result == NULL) return -1;
    int truth = PyObject_IsTrue(result);
    Py_DECREF(result);
    return truth;
}

static PyObject *same(PyObject *module, PyObject *args) {
    PyObject *a, *b, *reference;
    if (!PyArg_ParseTuple(args, "OOO", &a, &b, &reference)) return NULL;
    int rc = same_of(a, b, reference);
    if (rc < 0) return NULL;
    return PyBool_FromLong(rc);
}

/* same_entries(want, got, reference) -> -1 when the two lists have the same length and every pair is surely equal
 * (same_of), else the index of the first pair it cannot call equal (len of the shorter list on a length
 * difference). */
static PyObject *same_entries(PyObject *module, PyObject *args) {
    PyObject *want, *got, *reference;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyList_Type, &want, &PyList_Type, &got, &reference)) return NULL;
    Py_ssize_t i = 0;
    for (; i < PyList_GET_SIZE(want) && i < PyList_GET_SIZE(got); i++) {
        PyObject *x = PyList_GET_ITEM(want, i), *y = PyList_GET_ITEM(got, i);
        Py_INCREF(x);
        Py_INCREF(y);
        int rc = same_of(x, y, reference);
        Py_DECREF(x);
        Py_DECREF(y);
        if (rc < 0) return NULL;
        if (rc == 0) return PyLong_FromSsize_t(i);
    }
    return PyLong_FromSsize_t(PyList_GET_SIZE(want) == PyList_GET_SIZE(got) ? -1 : i);
}

/* -- the migration's per-entry work: a POJO's fields mapped, a run of entries migrated ------------------------------
 * The twins of flinkstate/migration/transforms.py's ``pojo`` closure and of the per-entry loops that apply a state's
 * transform (migrate_entry) and encode the result (StateCodec.encode_value). They take the common case and leave
 * anything else to the reference: a run they do not finish (a transform raised or returned DROP, a list emptied)
 * is None, and the caller reruns it entry by entry, which counts, dead-letters and reports as it always did. */

typedef struct {
    PyObject_HEAD
    PyObject *names;      /* tuple: the new fields' names, in the new order */
    PyObject *sources;    /* tuple: the old field each comes from, or None for an added field */
    PyObject *parts;      /* tuple: the field's own transform, or None */
    PyObject *constants;  /* tuple: an added field's value */
    PyObject *reference;  /* the pure-Python twin: a value that is not a plain dict, or a subclass value */
} RecordMapObject;

static PyTypeObject RecordMapType;
static PyObject *CLASS_KEY;  /* "@class": a POJO subclass value, which a changed POJO refuses (the reference says so) */

static int RecordMap_init(RecordMapObject *self, PyObject *args, PyObject *kwds) {
    PyObject *names, *sources, *parts, *constants, *reference;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O", &PyTuple_Type, &names, &PyTuple_Type, &sources, &PyTuple_Type, &parts,
                          &PyTuple_Type, &constants, &reference))
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(sources) != n || PyTuple_GET_SIZE(parts) != n || PyTuple_GET_SIZE(constants) != n) {
        PyErr_SetString(PyExc_TypeError, "RecordMap: names, sources, parts and constants differ in length");
        return -1;
    }
    Py_XSETREF(self->names, Py_NewRef(names));
    Py_XSETREF(self->sources, Py_NewRef(sources));
    Py_XSETREF(self->parts, Py_NewRef(parts));
    Py_XSETREF(self->constants, Py_NewRef(constants));
    Py_XSETREF(self->reference, Py_NewRef(reference));
    return 0;
}

static void RecordMap_dealloc(RecordMapObject *self) {
    Py_XDECREF(self->names);
    Py_XDECREF(self->sources);
    Py_XDECREF(self->parts);
    Py_XDECREF(self->constants);
    Py_XDECREF(self->reference);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *apply_transform(PyObject *transform, PyObject *value);

static PyObject *record_map_apply(RecordMapObject *self, PyObject *value) {
    if (self->names == NULL) {
        PyErr_SetString(PyExc_ValueError, "RecordMap not initialised");
        return NULL;
    }
    if (value == Py_None) Py_RETURN_NONE;
    if (!PyDict_CheckExact(value)) return PyObject_CallOneArg(self->reference, value);
    int subclass = PyDict_Contains(value, CLASS_KEY);
    if (subclass < 0) return NULL;
    if (subclass) return PyObject_CallOneArg(self->reference, value);  /* raises the reference's ConversionError */
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(self->names);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *source = PyTuple_GET_ITEM(self->sources, i), *item;
        if (source == Py_None) {
            item = Py_NewRef(PyTuple_GET_ITEM(self->constants, i));
        } else {
            PyObject *old = PyDict_GetItemWithError(value, source);  /* borrowed; missing is None (dict.get) */
            if (old == NULL && PyErr_Occurred()) goto fail;
            PyObject *part = PyTuple_GET_ITEM(self->parts, i);
            if (old == NULL || old == Py_None || part == Py_None) {
                item = Py_NewRef(old == NULL ? Py_None : old);
            } else {
                item = apply_transform(part, old);
                if (item == NULL) goto fail;
            }
        }
        int rc = PyDict_SetItem(out, PyTuple_GET_ITEM(self->names, i), item);
        Py_DECREF(item);
        if (rc < 0) goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *apply_transform(PyObject *transform, PyObject *value) {
    if (Py_IS_TYPE(transform, &RecordMapType)) return record_map_apply((RecordMapObject *)transform, value);
    return PyObject_CallOneArg(transform, value);
}

static PyObject *RecordMap_call(RecordMapObject *self, PyObject *args, PyObject *kwds) {
    PyObject *value;
    if (!PyArg_ParseTuple(args, "O", &value)) return NULL;
    return record_map_apply(self, value);
}

static PyTypeObject RecordMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "flinkstate._speedups._cdecode.RecordMap",
    .tp_basicsize = sizeof(RecordMapObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RecordMap(names, sources, parts, constants, reference)(value): a POJO's fields matched by name into "
              "a new dict (renames, added fields' constants, each field's transform); the reference takes what it "
              "does not (a value that is not a dict, a subclass value).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RecordMap_init,
    .tp_dealloc = (destructor)RecordMap_dealloc,
    .tp_call = (ternaryfunc)RecordMap_call,
};

/* A value's bytes appended by an encoder: the compiled tree (encode_with) or any Python encoder(value, out). */
static int encode_by(PyObject *encoder, PyObject *value, PyObject *out) {
    if (PyObject_TypeCheck(encoder, &EncoderType) && ((EncoderObject *)encoder)->root != NULL)
        return encode_with(encoder, value, out);
    PyObject *result = PyObject_CallFunctionObjArgs(encoder, value, out, NULL);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}

static PyObject *expected_entry(PyObject *entry, int kind, PyObject *transform, PyObject *drop);

/* One entry's new stored value appended to ``out``: the one rule of a migrated entry (expected_entry, which the
 * verifier applies too, as migrate_entry serves both in Python), then StateCodec.encode_value's bytes. 1: the
 * reference must take the run (DROP, a list emptied, not an entry of ``kind``); -1: an error. */
static int migrate_value(PyObject *entry, int kind, PyObject *transform, PyObject *drop, PyObject *value_enc,
                         PyObject *out) {
    PyObject *new_entry = expected_entry(entry, kind, transform, drop);
    if (new_entry == NULL) return PyErr_Occurred() ? -1 : 1;
    PyObject *value = PyTuple_GET_ITEM(new_entry, kind == E_MAP ? 3 : 2);
    int rc = 0;
    if (kind == E_LIST) {  /* a new list of its own (expected_entry): no transform runs while it is encoded */
        for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(value); i++) {
            if (i) rc = put_byte(out, 0x2C);
            if (rc == 0) rc = encode_by(value_enc, PyList_GET_ITEM(value, i), out);
        }
    } else if (kind == E_MAP && value == Py_None) {
        rc = put_byte(out, 1);
    } else if (kind == E_MAP) {
        if ((rc = put_byte(out, 0)) == 0) rc = encode_by(value_enc, value, out);
    } else {
        rc = encode_by(value_enc, value, out);
    }
    Py_DECREF(new_entry);
    return rc;
}

static int is_entry(PyObject *entry, int kind) {
    return PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == (kind == E_MAP ? 4 : 3);
}

/* Whether an error leaves the run to the reference (an Exception: the reference reruns it and reports, or
 * dead-letters) or is to be raised (KeyboardInterrupt, MemoryError and the like). */
static PyObject *leave_to_reference(void) {
    if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError)) return NULL;
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* migrate_entry(entry) for VALUE, LIST and MAP entries, keys and user keys kept: a new reference; NULL with an
 * error set (a transform raised); NULL without one when the entry is the reference's (DROP, a list emptied, not an
 * entry of ``kind``). */
static PyObject *expected_entry(PyObject *entry, int kind, PyObject *transform, PyObject *drop) {
    if (!is_entry(entry, kind)) return NULL;
    int slot = kind == E_MAP ? 3 : 2;
    PyObject *value = PyTuple_GET_ITEM(entry, slot), *new_value = NULL;
    if (kind == E_LIST) {
        if (!PyList_CheckExact(value)) return NULL;
        new_value = PyList_New(0);
        for (Py_ssize_t j = 0; new_value != NULL && j < PyList_GET_SIZE(value); j++) {
            PyObject *item = PyList_GET_ITEM(value, j);
            Py_INCREF(item);
            PyObject *new_item = transform == Py_None ? Py_NewRef(item) : apply_transform(transform, item);
            Py_DECREF(item);
            if (new_item == NULL || (new_item != drop && PyList_Append(new_value, new_item) < 0))
                Py_CLEAR(new_value);
            Py_XDECREF(new_item);
        }
        if (new_value != NULL && PyList_GET_SIZE(new_value) == 0) {  /* emptied: not stored */
            Py_DECREF(new_value);
            return NULL;
        }
    } else if (transform == Py_None || (kind == E_MAP && value == Py_None)) {
        new_value = Py_NewRef(value);
    } else {
        new_value = apply_transform(transform, value);
    }
    if (new_value == NULL) return NULL;
    if (new_value == drop) {
        Py_DECREF(new_value);
        return NULL;
    }
    PyObject *new_entry = PyTuple_New(PyTuple_GET_SIZE(entry));
    if (new_entry == NULL) {
        Py_DECREF(new_value);
        return NULL;
    }
    for (Py_ssize_t j = 0; j < slot; j++) PyTuple_SET_ITEM(new_entry, j, Py_NewRef(PyTuple_GET_ITEM(entry, j)));
    PyTuple_SET_ITEM(new_entry, slot, new_value);
    return new_entry;
}

/* expected_run(entries, kind, transform, drop) -> [migrate_entry(entry), ...] for a run of decoded entries, or None
 * when the run is the reference's (a transform raised or returned DROP, a list emptied): the verifier's expected
 * entries. VALUE, LIST and MAP; keys and user keys are kept. */
static PyObject *expected_run(PyObject *module, PyObject *args) {
    PyObject *entries, *transform, *drop;
    int kind;
    if (!PyArg_ParseTuple(args, "O!iOO", &PyList_Type, &entries, &kind, &transform, &drop)) return NULL;
    if (kind < E_VALUE || kind > E_MAP) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_SIZE(entries) != n) goto reference;  /* changed under us by a Python transform */
        PyObject *entry = PyList_GET_ITEM(entries, i);
        Py_INCREF(entry);
        PyObject *new_entry = expected_entry(entry, kind, transform, drop);
        Py_DECREF(entry);
        if (new_entry == NULL) goto reference;
        PyList_SET_ITEM(out, i, new_entry);
    }
    return out;
reference:
    Py_DECREF(out);
    if (PyErr_Occurred()) return leave_to_reference();
    Py_RETURN_NONE;
}

/* expected_block(data, key_group, wanted, state_count, prefix_bytes, ambiguous, key_enc, ns_enc, value_enc,
 * user_key_enc, transform, drop) -> the verifier's expected entries of state ``wanted`` in a source block: each
 * entry decoded, checked to re-encode to exactly the bytes Flink wrote (reencode_check) and migrated
 * (expected_run), in one step, without a list of the decoded entries. None when any entry is the reference's: it
 * does not re-encode exactly, its migration raised or was dropped, or the block does not walk or decode here (the
 * caller then reruns the reference, which reports). The encoders are the state's own (compiled). */
static PyObject *Entry_expected_block(EntryObject *self, PyObject *args) {
    PyObject *data, *key_enc, *ns_enc, *value_enc, *user_key_enc, *transform, *drop;
    Py_ssize_t key_group, wanted, state_count;
    int prefix_bytes, ambiguous;
    Ctx ctx;
    BlockWalk walk;
    BlockEntry e;
    int rc;
    if (!PyArg_ParseTuple(args, "O!nnnipOOOOOO", &PyBytes_Type, &data, &key_group, &wanted, &state_count,
                          &prefix_bytes, &ambiguous, &key_enc, &ns_enc, &value_enc, &user_key_enc, &transform,
                          &drop))
        return NULL;
    int kind = self->kind;
    if (kind < E_VALUE || kind > E_MAP || (prefix_bytes != 1 && prefix_bytes != 2) ||
        !PyObject_TypeCheck(key_enc, &EncoderType) || !PyObject_TypeCheck(ns_enc, &EncoderType) ||
        !PyObject_TypeCheck(value_enc, &EncoderType) ||
        (kind == E_MAP && !PyObject_TypeCheck(user_key_enc, &EncoderType)))
        Py_RETURN_NONE;
    PyObject *out = PyList_New(0), *scratch = PyByteArray_FromStringAndSize(NULL, 0);
    if (out == NULL || scratch == NULL) goto reference;
    ctx_from(&ctx, data);
    if (walk_start(&walk, data, state_count, key_group, 1, prefix_bytes, 1) < 0) goto reference;
    while ((rc = walk_next(&walk, &e)) > 0) {
        if (e.state_id != wanted) continue;
        PyObject *entry = decode_entry(self, &ctx, e.ks, e.ke, e.vs, e.ve);
        if (entry == NULL) goto reference;
        rc = is_entry(entry, kind) ? reencodes_exactly(entry, &e, walk.p, kind, prefix_bytes, key_group, ambiguous,
                                                       key_enc, ns_enc, value_enc, user_key_enc, scratch) : 0;
        PyObject *new_entry = rc == 1 ? expected_entry(entry, kind, transform, drop) : NULL;
        Py_DECREF(entry);
        if (new_entry == NULL) goto reference;
        rc = PyList_Append(out, new_entry);
        Py_DECREF(new_entry);
        if (rc < 0) goto reference;
    }
    if (rc < 0) goto reference;
    Py_DECREF(scratch);
    return out;
reference:
    Py_XDECREF(out);
    Py_XDECREF(scratch);
    if (PyErr_Occurred()) return leave_to_reference();
    Py_RETURN_NONE;
}

static int same_of(PyObject *a, PyObject *b, PyObject *reference);

/* compare_block(data, key_group, wanted, state_count, prefix_bytes, expected, reference) -> -1 when the entries of
 * state ``wanted`` in a written block, decoded one by one, are surely equal to ``expected`` pair by pair and as
 * many (same_entries, without a list of the decoded entries), else the index of the first it cannot call equal (the
 * caller then decodes the block with the reference and compares canonical forms, which decide). Raises on a block
 * it cannot walk or decode (the caller's reference reports it). */
static PyObject *Entry_compare_block(EntryObject *self, PyObject *args) {
    PyObject *data, *expected, *reference;
    Py_ssize_t key_group, wanted, state_count, index = 0;
    int prefix_bytes;
    Ctx ctx;
    BlockWalk walk;
    BlockEntry e;
    int rc;
    if (!PyArg_ParseTuple(args, "O!nnniO!O", &PyBytes_Type, &data, &key_group, &wanted, &state_count, &prefix_bytes,
                          &PyList_Type, &expected, &reference))
        return NULL;
    ctx_from(&ctx, data);
    if (walk_start(&walk, data, state_count, key_group, 1, prefix_bytes, 1) < 0) return NULL;
    while ((rc = walk_next(&walk, &e)) > 0) {
        if (e.state_id != wanted) continue;
        if (index >= PyList_GET_SIZE(expected)) return PyLong_FromSsize_t(index);
        PyObject *got = decode_entry(self, &ctx, e.ks, e.ke, e.vs, e.ve);
        if (got == NULL) return NULL;
        PyObject *want = PyList_GET_ITEM(expected, index);
        Py_INCREF(want);
        rc = same_of(want, got, reference);
        Py_DECREF(want);
        Py_DECREF(got);
        if (rc < 0) return NULL;
        if (rc == 0) return PyLong_FromSsize_t(index);
        index++;
    }
    if (rc < 0) return NULL;
    return PyLong_FromSsize_t(index == PyList_GET_SIZE(expected) ? -1 : index);
}

/* migrate_block(data, key_group, wanted, state_count, prefix_bytes, kind, transform, drop, value_enc) -> the
 * entries of state ``wanted`` in the block as encode_block writes them, without the state id and end mark (their
 * keys as stored, their values migrate_entry's, encoded by ``value_enc``), each entry decoded, migrated and written in one step: no list of a key group's entries is built, so
 * the work per entry does not grow with the key group (a 10^7-entry savepoint's key groups hold tens of thousands).
 * None when the run is the reference's (a transform raised or returned DROP, a list emptied); also when the block does not walk or decode here (the
 * caller's reference then reports it). The entries of ``wanted`` must be one run (the caller checked). */
static PyObject *Entry_migrate_block(EntryObject *self, PyObject *args) {
    PyObject *data, *transform, *drop, *value_enc;
    Py_ssize_t key_group, wanted, state_count;
    int prefix_bytes, kind;
    Ctx ctx;
    BlockWalk walk;
    BlockEntry e;
    int rc;
    if (!PyArg_ParseTuple(args, "O!nnniiOOO", &PyBytes_Type, &data, &key_group, &wanted, &state_count,
                          &prefix_bytes, &kind, &transform, &drop, &value_enc))
        return NULL;
    if (kind < E_VALUE || kind > E_MAP || kind != self->kind) Py_RETURN_NONE;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, 0);
    if (out == NULL) return NULL;
    ctx_from(&ctx, data);
    if (walk_start(&walk, data, state_count, key_group, 1, prefix_bytes, 1) < 0) goto reference;
    while ((rc = walk_next(&walk, &e)) > 0) {
        if (e.state_id != wanted) continue;
        PyObject *entry = decode_entry(self, &ctx, e.ks, e.ke, e.vs, e.ve);
        if (entry == NULL) goto reference;
        const unsigned char *key = walk.p + e.ks;
        Py_ssize_t key_size = e.ke - e.ks;
        rc = put_be(out, (uint64_t)key_size, 4);
        if (rc == 0) rc = put(out, key, key_size);  /* the run flag as stored: set on the run's last entry only */
        Py_ssize_t length_at = PyByteArray_GET_SIZE(out);
        if (rc == 0) rc = put_be(out, 0, 4);
        if (rc == 0) rc = migrate_value(entry, kind, transform, drop, value_enc, out);
        Py_DECREF(entry);
        if (rc > 0) goto reference;
        if (rc < 0) {
            Py_DECREF(out);
            return leave_to_reference();
        }
        Py_ssize_t value_size = PyByteArray_GET_SIZE(out) - length_at - 4;
        if (value_size > INT32_MAX) goto reference;
        unsigned char *at = (unsigned char *)PyByteArray_AS_STRING(out) + length_at;
        for (int b = 0; b < 4; b++) at[b] = (unsigned char)((uint64_t)value_size >> (8 * (3 - b)));
    }
    if (rc < 0) goto reference;
    if (PyByteArray_GET_SIZE(out) == 0) goto reference;
    return out;
reference:
    Py_DECREF(out);
    if (PyErr_Occurred()) return leave_to_reference();
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"expected_run", expected_run, METH_VARARGS,
     "expected_run(entries, kind, transform, drop) -> the run's migrated entries, or None"},
    {"reencode_check", reencode_check, METH_VARARGS,
     "reencode_check(data, key_group, wanted, state_count, prefix_bytes, entries, kind, ambiguous, key_enc, ns_enc, "
     "value_enc, user_key_enc) -> index of the first entry not re-encoding to its bytes, or -1"},
    {"block_runs", block_runs, METH_VARARGS,
     "block_runs(data, state_count, key_group, prefix_bytes) -> [(state_id, start, end, count), ...] in order"},
    {"state_span", state_span, METH_VARARGS,
     "state_span(data, state_count, key_group, prefix_bytes, state_id) -> (start, end, count) of one run, or None"},
    {"same", same, METH_VARARGS, "same(a, b, reference) -> whether two decoded values are surely equal to Java"},
    {"same_entries", same_entries, METH_VARARGS,
     "same_entries(want, got, reference) -> -1 when equal pair by pair, else the first index not surely equal"},
    {"canonical", canonical, METH_VARARGS, "canonical(value, reference) -> the reference's canonical form"},
    {"raw_pairs", raw_pairs, METH_VARARGS,
     "raw_pairs(data, state_count, key_group, prefix_bytes, state_id) -> [(key bytes, value bytes), ...]"},
    {"raw_entries", raw_entries, METH_VARARGS,
     "raw_entries(data, state_count, key_group, prefix_bytes) -> list of (state id, ks, ke, vs, ve)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cdecode", "Compiled keyed-state decoding (see flinkstate._speedups).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__cdecode(void) {
    if (PyType_Ready(&CodecType) < 0 || PyType_Ready(&EntryType) < 0 || PyType_Ready(&EncoderType) < 0 ||
        PyType_Ready(&RecordMapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    N_NONE = PyUnicode_InternFromString("NoneType");
    N_BOOL = PyUnicode_InternFromString("bool");
    N_STR = PyUnicode_InternFromString("str");
    N_BYTES = PyUnicode_InternFromString("bytes");
    N_INT = PyUnicode_InternFromString("int");
    N_FLOAT = PyUnicode_InternFromString("float");
    N_MAP = PyUnicode_InternFromString("map");
    N_SEQ = PyUnicode_InternFromString("seq");
    B_NAN = PyBytes_FromString("NaN");
    CLASS_KEY = PyUnicode_InternFromString("@class");
    if (!N_NONE || !N_BOOL || !N_STR || !N_BYTES || !N_INT || !N_FLOAT || !N_MAP || !N_SEQ || !B_NAN || !CLASS_KEY) goto fail;
    DecodeError = PyErr_NewException("flinkstate._speedups._cdecode.DecodeError", PyExc_ValueError, NULL);
    if (DecodeError == NULL || PyModule_AddObject(m, "DecodeError", DecodeError) < 0) goto fail;
    Py_INCREF(DecodeError);
    Py_INCREF(&CodecType);
    if (PyModule_AddObject(m, "Codec", (PyObject *)&CodecType) < 0) goto fail;
    Py_INCREF(&EntryType);
    if (PyModule_AddObject(m, "EntryDecoder", (PyObject *)&EntryType) < 0) goto fail;
    Py_INCREF(&EncoderType);
    if (PyModule_AddObject(m, "Encoder", (PyObject *)&EncoderType) < 0) goto fail;
    Py_INCREF(&RecordMapType);
    if (PyModule_AddObject(m, "RecordMap", (PyObject *)&RecordMapType) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
