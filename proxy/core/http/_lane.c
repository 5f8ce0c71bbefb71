/* The hit lane's head reader in C (issue 35, decisions 0050 and 0055).
 *
 * read_head(data, start) is proxy.core.http.lane.read_head_py, byte for byte: the same
 * strict subset of HTTP/1.1 (that module's docstring), the same answer (a LaneHead, or None
 * for anything else). The Python function stays the reference and the fallback; the
 * differential test (tests/core/test_lane_c.py) runs the corpus and generated heads through
 * both. Pure: no I/O, no clock, no state but the two types given to setup() once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_HEAD 8190
#define MAX_FIELDS 100

static PyObject *fields_type = NULL; /* lane.Fields, a dict subclass */
static PyObject *head_type = NULL;   /* lane.LaneHead, a tuple subclass */
static PyObject *str_get = NULL;
static PyObject *str_head = NULL;

/* RFC 9110 §5.6.2 tchar */
static unsigned char is_tchar[256];
/* the lane's target characters after the leading '/': RFC 3986's unreserved, sub-delims,
   ':', '@', '/', '?' and '%' */
static unsigned char is_target[256];

static void
init_tables(void)
{
    const char *t = "!#$%&'*+.^_`|~-";
    for (int c = '0'; c <= '9'; c++) is_tchar[c] = is_target[c] = 1;
    for (int c = 'A'; c <= 'Z'; c++) is_tchar[c] = is_target[c] = 1;
    for (int c = 'a'; c <= 'z'; c++) is_tchar[c] = is_target[c] = 1;
    for (; *t; t++) is_tchar[(unsigned char)*t] = 1;
    for (t = "-._~!$&'()*+,;=:@/?%"; *t; t++) is_target[(unsigned char)*t] = 1;
}

typedef struct {
    Py_ssize_t name, name_len, value, value_len;
} Line;

/* Whether the ASCII bytes p[0:n] equal the lower-case word w (n == strlen(w)). */
static int
lower_equal(const char *p, Py_ssize_t n, const char *w)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 'A' && c <= 'Z') c += 32;
        if (c != (unsigned char)w[i]) return 0;
    }
    return w[n] == '\0';
}

static PyObject *
lower_str(const char *p, Py_ssize_t n)
{
    PyObject *s = PyUnicode_New(n, 127);
    if (s == NULL) return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        out[i] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
    }
    return s;
}

static PyObject *
parse(const char *buf, Py_ssize_t size, Py_ssize_t start)
{
    Line lines[MAX_FIELDS];
    Py_ssize_t i = start, target, target_len, count = 0;
    PyObject *method;
    if (start < 0 || start > size) Py_RETURN_NONE;
    const char *p = buf + start;
    Py_ssize_t left = size - start;
    if (left >= 4 && memcmp(p, "GET ", 4) == 0) {
        method = str_get;
        i += 4;
    }
    else if (left >= 5 && memcmp(p, "HEAD ", 5) == 0) {
        method = str_head;
        i += 5;
    }
    else Py_RETURN_NONE;
    if (i >= size || buf[i] != '/') Py_RETURN_NONE;
    target = i++;
    while (i < size && is_target[(unsigned char)buf[i]]) i++;
    target_len = i - target;
    if (size - i < 11 || memcmp(buf + i, " HTTP/1.1\r\n", 11) != 0) Py_RETURN_NONE;
    i += 11;
    for (;;) {
        if (i < size && buf[i] == '\r') break; /* the empty line, once there is a field */
        if (count == MAX_FIELDS) Py_RETURN_NONE;
        Py_ssize_t name = i;
        while (i < size && is_tchar[(unsigned char)buf[i]]) i++;
        if (i == name || i >= size || buf[i] != ':') Py_RETURN_NONE;
        Py_ssize_t name_len = i - name;
        Py_ssize_t value = ++i;
        while (i < size && (buf[i] == '\t' || ((unsigned char)buf[i] >= 0x20 && (unsigned char)buf[i] <= 0x7e))) i++;
        if (size - i < 2 || buf[i] != '\r' || buf[i + 1] != '\n') Py_RETURN_NONE;
        Py_ssize_t value_end = i;
        i += 2;
        while (value < value_end && (buf[value] == ' ' || buf[value] == '\t')) value++;
        while (value_end > value && (buf[value_end - 1] == ' ' || buf[value_end - 1] == '\t')) value_end--;
        lines[count].name = name;
        lines[count].name_len = name_len;
        lines[count].value = value;
        lines[count].value_len = value_end - value;
        count++;
    }
    if (count == 0 || size - i < 2 || buf[i + 1] != '\n') Py_RETURN_NONE;
    i += 2;
    if (i - start > MAX_HEAD) Py_RETURN_NONE;
    /* Before any object is made: a field that frames a body or an upgrade, a Connection
       but keep-alive, no Host or an empty one. Duplicates are found as the dict is built. */
    Py_ssize_t host = -1;
    for (Py_ssize_t k = 0; k < count; k++) {
        const char *n = buf + lines[k].name;
        Py_ssize_t len = lines[k].name_len;
        if (lower_equal(n, len, "content-length") || lower_equal(n, len, "transfer-encoding")
            || lower_equal(n, len, "upgrade") || lower_equal(n, len, "expect"))
            Py_RETURN_NONE;
        if (lower_equal(n, len, "connection")
            && !lower_equal(buf + lines[k].value, lines[k].value_len, "keep-alive"))
            Py_RETURN_NONE;
        if (lower_equal(n, len, "host")) host = k;
    }
    if (host < 0 || lines[host].value_len == 0) Py_RETURN_NONE;
    PyObject *fields = PyObject_CallNoArgs(fields_type);
    if (fields == NULL) return NULL;
    PyObject *host_str = NULL;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *key = lower_str(buf + lines[k].name, lines[k].name_len);
        if (key == NULL) goto error;
        PyObject *val = PyUnicode_DecodeASCII(buf + lines[k].value, lines[k].value_len, NULL);
        if (val == NULL) {
            Py_DECREF(key);
            goto error;
        }
        int seen = PyDict_Contains(fields, key);
        if (seen != 0 || PyDict_SetItem(fields, key, val) < 0) {
            Py_DECREF(key);
            Py_DECREF(val);
            if (seen == 1) {
                Py_DECREF(fields);
                Py_RETURN_NONE; /* a field named twice */
            }
            goto error;
        }
        if (k == host) host_str = Py_NewRef(val);
        Py_DECREF(key);
        Py_DECREF(val);
    }
    PyObject *target_str = PyUnicode_DecodeASCII(buf + target, target_len, NULL);
    if (target_str == NULL) goto error;
    PyObject *end = PyLong_FromSsize_t(i);
    if (end == NULL) {
        Py_DECREF(target_str);
        goto error;
    }
    /* A LaneHead made as tuple.__new__(LaneHead, ...) makes it, with no Python frame: a
       tuple subclass with no __dict__ (NamedTuple's __slots__ = ()) is its five items. */
    PyObject *result = ((PyTypeObject *)head_type)->tp_alloc((PyTypeObject *)head_type, 5);
    if (result == NULL) {
        Py_DECREF(target_str);
        Py_DECREF(end);
        goto error;
    }
    PyTuple_SET_ITEM(result, 0, Py_NewRef(method));
    PyTuple_SET_ITEM(result, 1, target_str);
    PyTuple_SET_ITEM(result, 2, fields);
    PyTuple_SET_ITEM(result, 3, host_str);
    PyTuple_SET_ITEM(result, 4, end);
    return result;
error:
    Py_XDECREF(host_str);
    Py_DECREF(fields);
    return NULL;
}

static PyObject *
read_head(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (head_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_lane.setup() was not called");
        return NULL;
    }
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "read_head(data, start=0)");
        return NULL;
    }
    Py_ssize_t start = 0;
    if (nargs == 2) {
        start = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
        if (start == -1 && PyErr_Occurred()) return NULL;
    }
    if (PyBytes_CheckExact(args[0]))
        return parse(PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), start);
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = parse(view.buf, view.len, start);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
setup(PyObject *module, PyObject *args)
{
    PyObject *fields, *head;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &fields, &PyType_Type, &head))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)fields, &PyDict_Type)
        || !PyType_IsSubtype((PyTypeObject *)head, &PyTuple_Type)
        || ((PyTypeObject *)head)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "setup(a dict subclass, a tuple subclass)");
        return NULL;
    }
    Py_XSETREF(fields_type, Py_NewRef(fields));
    Py_XSETREF(head_type, Py_NewRef(head));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"read_head", (PyCFunction)(void (*)(void))read_head, METH_FASTCALL,
     "read_head(data, start=0): lane.read_head_py's answer, read in C."},
    {"setup", setup, METH_VARARGS, "setup(Fields, LaneHead): the types read_head makes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "proxy.core.http._lane", "The hit lane's head reader in C.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__lane(void)
{
    init_tables();
    str_get = PyUnicode_InternFromString("GET");
    str_head = PyUnicode_InternFromString("HEAD");
    if (str_get == NULL || str_head == NULL) return NULL;
    return PyModule_Create(&module_def);
}
