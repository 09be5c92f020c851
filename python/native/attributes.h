// Python values as lens attributes: bool, int, float, str, and lists or tuples of one of those. Anything else
// (None, a dict, an object, an int beyond 64 bits, a mixed list) has no attribute form and is dropped, never an
// error: a span's or a metric's attributes must not be able to stop a training step.
#pragma once

#include <Python.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lens/attributes.h"

namespace lens_python {

// Converted attributes and the storage their arrays point into. String keys and values point into the Python
// str objects (their cached UTF-8), which the caller keeps alive while the attributes are used. The usual few
// attributes of a span need no heap memory: a span on every layer of every micro-batch allocates nothing here.
class AttributeBuffer {
 public:
  // NeMo Lens's default redaction (DEFAULT_REDACT_KEYS): a str value under one of these keys is replaced, in the
  // attributes managed_span and span_cm take (its safe_set_span_attributes does it); lens.helpers has the same set.
  static constexpr std::string_view kRedacted = "[REDACTED]";
  static bool is_redacted_key(std::string_view key) noexcept {
    for (std::string_view k : {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"})
      if (key == k) return true;
    return false;
  }

  AttributeBuffer() = default;
  explicit AttributeBuffer(bool redact) : redact_(redact) {}

  // Adds one key and value; false when dropped.
  bool add(PyObject* key, PyObject* value) {
    std::string_view k;
    if (!utf8(key, &k)) return false;
    if (value == Py_True || value == Py_False) return push(k, value == Py_True);
    if (PyLong_Check(value)) {
      std::int64_t v = 0;
      return as_int64(value, &v) && push(k, v);
    }
    if (PyFloat_Check(value)) return push(k, PyFloat_AS_DOUBLE(value));
    if (PyUnicode_Check(value)) {
      std::string_view s;
      if (redact_ && is_redacted_key(k)) return push(k, std::string_view(kRedacted));
      return utf8(value, &s) && push(k, s);
    }
    if (PyList_Check(value) || PyTuple_Check(value)) return add_array(k, value);
    if (PyIndex_Check(value)) return add_index(k, value);  // numpy integers
    return false;
  }

  // Every item of a dict (null: none).
  void add_dict(PyObject* dict) {
    if (dict == nullptr || !PyDict_Check(dict)) return;
    Py_ssize_t pos = 0;
    PyObject *key = nullptr, *value = nullptr;
    while (PyDict_Next(dict, &pos, &key, &value)) add(key, value);
  }

  std::span<const lens::Attribute> attributes() const noexcept {
    return overflow_.empty() ? std::span<const lens::Attribute>(inline_.items, count_)
                             : std::span<const lens::Attribute>(overflow_);
  }

 private:
  static bool utf8(PyObject* text, std::string_view* out) {
    if (!PyUnicode_Check(text)) return false;
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(text, &size);
    if (data == nullptr) {
      PyErr_Clear();  // a lone surrogate: no UTF-8 form
      return false;
    }
    *out = std::string_view(data, static_cast<std::size_t>(size));
    return true;
  }
  static bool as_int64(PyObject* value, std::int64_t* out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    *out = v;
    return true;
  }
  bool add_index(std::string_view k, PyObject* value) {
    PyObject* index = PyNumber_Index(value);
    if (index == nullptr) {
      PyErr_Clear();
      return false;
    }
    std::int64_t v = 0;
    bool ok = as_int64(index, &v);
    Py_DECREF(index);
    return ok && push(k, v);
  }
  // The attribute is built where it is kept, from the value itself: one built on the stack and copied is read back
  // in other widths than it was written, which stalls the store buffer on every attribute.
  template <typename Value>
  bool push(std::string_view key, Value value) {
    if (count_ < kInline) {
      ::new (static_cast<void*>(&inline_.items[count_++]))
          lens::Attribute{lens::AttributeKey(key), lens::AttributeValue(value)};
      return true;
    }
    if (overflow_.empty()) overflow_.assign(inline_.items, inline_.items + kInline);
    overflow_.push_back(lens::Attribute{lens::AttributeKey(key), lens::AttributeValue(value)});
    return true;
  }

  // A homogeneous list or tuple; bool is checked before int (a Python bool is an int).
  bool add_array(std::string_view k, PyObject* sequence) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
    PyObject** items = PySequence_Fast_ITEMS(sequence);
    if (n <= 0 || n > (Py_ssize_t{1} << 24)) return false;
    PyObject* first = items[0];
    auto all = [&](auto&& is) {
      for (Py_ssize_t i = 0; i < n; ++i)
        if (!is(items[i])) return false;
      return true;
    };
    Arrays& arrays = this->arrays();
    if (PyBool_Check(first) && all([](PyObject* o) { return PyBool_Check(o); })) {
      auto& v = arrays.bools.emplace_back(new bool[static_cast<std::size_t>(n)]);
      for (Py_ssize_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = items[i] == Py_True;
      return push(k, std::span<const bool>(v.get(), static_cast<std::size_t>(n)));
    }
    if (PyLong_Check(first) && all([](PyObject* o) { return PyLong_Check(o) && !PyBool_Check(o); })) {
      auto& v = arrays.ints.emplace_back();
      for (Py_ssize_t i = 0; i < n; ++i) {
        std::int64_t x = 0;
        if (!as_int64(items[i], &x)) return false;
        v.push_back(x);
      }
      return push(k, std::span<const std::int64_t>(v));
    }
    if (PyFloat_Check(first) && all([](PyObject* o) { return PyFloat_Check(o); })) {
      auto& v = arrays.doubles.emplace_back();
      for (Py_ssize_t i = 0; i < n; ++i) v.push_back(PyFloat_AS_DOUBLE(items[i]));
      return push(k, std::span<const double>(v));
    }
    if (PyUnicode_Check(first) && all([](PyObject* o) { return PyUnicode_Check(o); })) {
      auto& v = arrays.strings.emplace_back();
      for (Py_ssize_t i = 0; i < n; ++i) {
        std::string_view s;
        if (!utf8(items[i], &s)) return false;
        v.push_back(s);
      }
      return push(k, std::span<const std::string_view>(v));
    }
    return false;
  }

  // Deques: an array already pointed to never moves when another is added. Made at the first array only (a
  // deque allocates as it is constructed).
  struct Arrays {
    std::deque<std::unique_ptr<bool[]>> bools;
    std::deque<std::vector<std::int64_t>> ints;
    std::deque<std::vector<double>> doubles;
    std::deque<std::vector<std::string_view>> strings;
  };
  Arrays& arrays() {
    if (!arrays_) arrays_ = std::make_unique<Arrays>();
    return *arrays_;
  }

  static constexpr std::size_t kInline = 8;
  union Inline {  // left unconstructed: only the first count_ are written and read
    Inline() {}
    lens::Attribute items[kInline];
  } inline_;
  static_assert(std::is_trivially_destructible_v<lens::Attribute>);
  std::size_t count_ = 0;
  std::vector<lens::Attribute> overflow_;  // all of them, once there are more than kInline
  std::unique_ptr<Arrays> arrays_;
  bool redact_ = false;
};

}  // namespace lens_python
