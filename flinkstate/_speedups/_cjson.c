/* The compiled JSON Lines writer of `flinkstate dump` (see flinkstate/_speedups/__init__.py, fast_json_lines).
 *
 * The reference is flinkstate/cli/dump.py's per-entry loop: json.dumps(record, allow_nan=False) of a dict whose
 * values are flinkstate.jsonify.to_json of the decoded key, namespace, (user key) and value. This code writes the
 * same bytes: json.dumps' defaults (separators ", " and ": ", ensure_ascii, insertion order) for the exact built-in
 * types whose to_json form it knows (None, bool, int, float, str, bytes, list, tuple, dict with str keys); any other
 * value (a subclass, a set, a Decimal, a time model, a dict with other keys...) is written by `fallback`, the
 * reference's own `dumps(to_json(value))` for that value, so it cannot differ. JSON is compositional (no indent), so
 * a value's text inside a record is its text alone.
 *
 * Any failure (a fallback that raised or returned no ASCII text, an entry that is not a tuple of the right size, an
 * int too long to print) raises: the caller then writes that block with the reference, which raises its own error
 * after the same lines.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

/* Deeper values go to the fallback (whose recursion limit then decides, as in the reference). */
#define MAX_DEPTH 100

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int grow(Buf *b, Py_ssize_t n) {
    if (b->len + n <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) {
        if (cap > PY_SSIZE_T_MAX / 2) { PyErr_NoMemory(); return -1; }
        cap *= 2;
    }
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) { PyErr_NoMemory(); return -1; }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int put(Buf *b, const char *s, Py_ssize_t n) {
    if (grow(b, n) < 0) return -1;
    memcpy(b->data + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

#define PUT_LITERAL(b, s) put((b), (s), (Py_ssize_t)(sizeof(s) - 1))

static const char HEX[] = "0123456789abcdef";  /* json's Py_hexdigits: lowercase */

static inline char *put_u_escape(char *out, Py_UCS4 c) {
    out[0] = '\\'; out[1] = 'u';
    out[2] = HEX[(c >> 12) & 0xf]; out[3] = HEX[(c >> 8) & 0xf]; out[4] = HEX[(c >> 4) & 0xf]; out[5] = HEX[c & 0xf];
    return out + 6;
}

/* json.encoder's encode_basestring_ascii (C: ascii_escape_unicode): printable ASCII but '"' and '\\' as is, the five
 * short escapes, every other code point as \uXXXX (lowercase), astral ones as a surrogate pair. */
static int put_string(Buf *b, PyObject *s) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (n > (PY_SSIZE_T_MAX - 2) / 12 || grow(b, 2 + 12 * n) < 0) {  /* the longest escape: 12 chars */
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return -1;
    }
    char *out = b->data + b->len;
    *out++ = '"';
    Py_ssize_t start = 0;
    if (kind == PyUnicode_1BYTE_KIND) {  /* the common case: copy the run of characters that need no escape */
        const unsigned char *p = (const unsigned char *)data;
        Py_ssize_t i = 0;
        while (i < n && p[i] >= ' ' && p[i] <= '~' && p[i] != '\\' && p[i] != '"') i++;
        memcpy(out, p, (size_t)i);
        out += i;
        if (i == n) {
            *out++ = '"';
            b->len = out - b->data;
            return 0;
        }
        start = i;
    }
    for (Py_ssize_t i = start; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '\\' && c != '"') { *out++ = (char)c; continue; }
        switch (c) {
        case '\\': *out++ = '\\'; *out++ = '\\'; break;
        case '"': *out++ = '\\'; *out++ = '"'; break;
        case '\b': *out++ = '\\'; *out++ = 'b'; break;
        case '\f': *out++ = '\\'; *out++ = 'f'; break;
        case '\n': *out++ = '\\'; *out++ = 'n'; break;
        case '\r': *out++ = '\\'; *out++ = 'r'; break;
        case '\t': *out++ = '\\'; *out++ = 't'; break;
        default:
            if (c >= 0x10000) {
                Py_UCS4 v = c - 0x10000;
                out = put_u_escape(out, 0xd800 | ((v >> 10) & 0x3ff));
                out = put_u_escape(out, 0xdc00 | (v & 0x3ff));
            } else {
                out = put_u_escape(out, c);
            }
        }
    }
    *out++ = '"';
    b->len = out - b->data;
    return 0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* to_json's bytes: base64.b64encode (standard alphabet, '=' padding), a JSON string that needs no escape. */
static int put_base64(Buf *b, PyObject *bytes) {
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(bytes);
    Py_ssize_t n = PyBytes_GET_SIZE(bytes);
    if (n > (PY_SSIZE_T_MAX - 8) / 4 * 3 || grow(b, 2 + (n + 2) / 3 * 4) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return -1;
    }
    char *out = b->data + b->len;
    *out++ = '"';
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8) | p[i + 2];
        *out++ = B64[v >> 18]; *out++ = B64[(v >> 12) & 63]; *out++ = B64[(v >> 6) & 63]; *out++ = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *out++ = B64[v >> 18]; *out++ = B64[(v >> 12) & 63]; *out++ = '='; *out++ = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8);
        *out++ = B64[v >> 18]; *out++ = B64[(v >> 12) & 63]; *out++ = B64[(v >> 6) & 63]; *out++ = '=';
    }
    *out++ = '"';
    b->len = out - b->data;
    return 0;
}

/* ASCII text (a str, e.g. a repr or the fallback's JSON) as it is. */
static int put_ascii(Buf *b, PyObject *text) {
    if (!PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_TypeError, "JSON text is not an ASCII str");
        return -1;
    }
    return put(b, (const char *)PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text));
}

static int put_fallback(Buf *b, PyObject *value, PyObject *fallback) {
    PyObject *text = PyObject_CallOneArg(fallback, value);
    if (text == NULL) return -1;
    int rc = put_ascii(b, text);
    Py_DECREF(text);
    return rc;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                1e16, 1e17};

/* float.__repr__ (the shortest digits that read back as v) without its general algorithm, which takes ~0.5 us, for
 * the common doubles: 1e-3 <= |v| < 2^50 with a short decimal form. Returns 1 when written, 0 when v is not such a
 * double (the caller then asks repr's own algorithm). The first k (fewest fractional digits) for which
 * m = round(|v| * 10^k) < 2^50 reads back as v (m / 10^k, both exact doubles, one correctly rounded division, as
 * strtod reads "m e-k") is repr's: a shorter form would be found at its own k (the product's rounding error and
 * the form's distance from v are each under 1/8 there), and at this k only m is within half an ulp of v (an ulp of
 * v is under 10^-k / 4). Notation as repr's: fixed for these magnitudes, ".0" on integers. */
static int put_short_float(Buf *b, double v) {
    double a = v < 0 ? -v : v;
    if (!(a >= 1e-3 && a < 1125899906842624.0)) return 0;
    for (int k = 0; k < (int)(sizeof POW10 / sizeof POW10[0]); k++) {
        double scaled = a * POW10[k];
        if (scaled >= 1125899906842624.0) return 0;
        double m = nearbyint(scaled);
        if (m / POW10[k] != a) continue;
        char text[48], *end = text + sizeof text, *d = end;
        unsigned long long u = (unsigned long long)m;
        int digits = 0;
        if (k == 0) { *--d = '0'; *--d = '.'; }
        do {
            *--d = (char)('0' + u % 10);
            u /= 10;
            if (++digits == k) *--d = '.';
        } while (u || digits < k);
        if (digits == k) *--d = '0';  /* |v| < 1: "0." before the fraction */
        if (v < 0) *--d = '-';
        if (put(b, d, end - d) < 0) return -1;
        return 1;
    }
    return 0;
}

static int put_value(Buf *b, PyObject *value, PyObject *fallback, int depth);

static int put_items(Buf *b, PyObject *seq, PyObject *fallback, int depth) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if (put(b, "[", 1) < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i && PUT_LITERAL(b, ", ") < 0) return -1;
        if (put_value(b, items[i], fallback, depth + 1) < 0) return -1;
    }
    return put(b, "]", 1);
}

static int put_value(Buf *b, PyObject *value, PyObject *fallback, int depth) {
    PyTypeObject *type = Py_TYPE(value);
    if (depth > MAX_DEPTH) return put_fallback(b, value, fallback);
    if (value == Py_None) return PUT_LITERAL(b, "null");
    if (value == Py_True) return PUT_LITERAL(b, "true");
    if (value == Py_False) return PUT_LITERAL(b, "false");
    if (type == &PyUnicode_Type) return put_string(b, value);
    if (type == &PyLong_Type) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (!overflow) {
            if (v == -1 && PyErr_Occurred()) return -1;
            char digits[24], *end = digits + sizeof digits, *d = end;
            unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
            do { *--d = (char)('0' + u % 10); u /= 10; } while (u);
            if (v < 0) *--d = '-';
            return put(b, d, end - d);
        }
        PyObject *text = PyLong_Type.tp_repr(value);  /* what json writes (it may refuse a very long int) */
        if (text == NULL) return -1;
        int rc = put_ascii(b, text);
        Py_DECREF(text);
        return rc;
    }
    if (type == &PyFloat_Type) {
        double v = PyFloat_AS_DOUBLE(value);
        /* to_json: JSON has no NaN or infinities, so they are strings (Java's Double.toString) */
        if (Py_IS_NAN(v)) return PUT_LITERAL(b, "\"NaN\"");
        if (Py_IS_INFINITY(v)) return v > 0 ? PUT_LITERAL(b, "\"Infinity\"") : PUT_LITERAL(b, "\"-Infinity\"");
        int done = put_short_float(b, v);
        if (done) return done < 0 ? -1 : 0;
        char *text = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);  /* float.__repr__ itself */
        if (text == NULL) return -1;
        int rc = put(b, text, (Py_ssize_t)strlen(text));
        PyMem_Free(text);
        return rc;
    }
    if (type == &PyList_Type || type == &PyTuple_Type) {
        PyObject *seq = PySequence_Fast(value, "");
        if (seq == NULL) return -1;
        int rc = put_items(b, seq, fallback, depth);
        Py_DECREF(seq);
        return rc;
    }
    if (type == &PyDict_Type) {
        PyObject *key, *item;
        Py_ssize_t pos = 0;
        while (PyDict_Next(value, &pos, &key, &item)) {
            if (Py_TYPE(key) != &PyUnicode_Type) return put_fallback(b, value, fallback);  /* to_json's _key */
        }
        if (put(b, "{", 1) < 0) return -1;
        pos = 0;
        int first = 1;
        while (PyDict_Next(value, &pos, &key, &item)) {
            if (!first && PUT_LITERAL(b, ", ") < 0) return -1;
            first = 0;
            Py_INCREF(item);  /* a fallback runs Python code: keep the item alive */
            int rc = put_string(b, key) < 0 || PUT_LITERAL(b, ": ") < 0 ||
                     put_value(b, item, fallback, depth + 1) < 0;
            Py_DECREF(item);
            if (rc) return -1;
        }
        return put(b, "}", 1);
    }
    if (type == &PyBytes_Type) return put_base64(b, value);
    return put_fallback(b, value, fallback);
}

static const char *const FIELDS[2][4] = {
    {"{\"key\": ", ", \"namespace\": ", ", \"value\": ", NULL},
    {"{\"key\": ", ", \"namespace\": ", ", \"user_key\": ", ", \"value\": "},
};

/* json_lines(entries, is_map, fallback) -> str: one JSON line per entry, as the reference writes them. */
static PyObject *json_lines(PyObject *module, PyObject *args) {
    PyObject *entries, *fallback;
    int is_map;
    if (!PyArg_ParseTuple(args, "OpO:json_lines", &entries, &is_map, &fallback)) return NULL;
    PyObject *seq = PySequence_Fast(entries, "entries must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t arity = is_map ? 4 : 3;
    Buf b = {NULL, 0, 0};
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != arity) {
            PyErr_SetString(PyExc_ValueError, "an entry is not a tuple of the state's arity");
            goto fail;
        }
        Py_INCREF(entry);  /* a fallback runs Python code: keep the entry alive */
        int rc = 0;
        for (Py_ssize_t f = 0; f < arity && !rc; f++) {
            const char *field = FIELDS[is_map][f];
            rc = put(&b, field, (Py_ssize_t)strlen(field)) < 0 ||
                 put_value(&b, PyTuple_GET_ITEM(entry, f), fallback, 1) < 0;
        }
        Py_DECREF(entry);
        if (rc || PUT_LITERAL(&b, "}\n") < 0) goto fail;
    }
    Py_DECREF(seq);
    PyObject *text = PyUnicode_New(b.len, 127);
    if (text != NULL) memcpy(PyUnicode_DATA(text), b.data, (size_t)b.len);
    PyMem_Free(b.data);
    return text;
fail:
    Py_DECREF(seq);
    PyMem_Free(b.data);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"json_lines", json_lines, METH_VARARGS,
     "json_lines(entries, is_map, fallback) -> str: the JSON lines of `flinkstate dump` for these entries"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cjson", "The compiled JSON Lines writer of dump (see flinkstate._speedups).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__cjson(void) { return PyModule_Create(&module); }
