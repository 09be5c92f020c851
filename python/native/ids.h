// Trace and span ids as Python ints (OpenTelemetry's form), big-endian bytes to int without text between.
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>

namespace lens_python {

inline std::uint64_t big_endian_u64(const std::uint8_t* bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | bytes[i];
  return v;
}

// A new reference to the int of an 8- or 16-byte id, or null with a Python error set.
inline PyObject* int_of_id(const std::uint8_t* bytes, std::size_t size) {
  if (size == 8) return PyLong_FromUnsignedLongLong(big_endian_u64(bytes));
  PyObject* high = PyLong_FromUnsignedLongLong(big_endian_u64(bytes));
  PyObject* low = PyLong_FromUnsignedLongLong(big_endian_u64(bytes + 8));
  PyObject* shift = PyLong_FromLong(64);
  PyObject* shifted = high != nullptr && shift != nullptr ? PyNumber_Lshift(high, shift) : nullptr;
  PyObject* id = shifted != nullptr && low != nullptr ? PyNumber_Or(shifted, low) : nullptr;
  Py_XDECREF(high);
  Py_XDECREF(low);
  Py_XDECREF(shift);
  Py_XDECREF(shifted);
  return id;
}

inline void put_big_endian_u64(std::uint64_t v, std::uint8_t* bytes) {
  for (int i = 7; i >= 0; --i, v >>= 8) bytes[i] = static_cast<std::uint8_t>(v & 0xFF);
}

// An int in [0, 2**(8*size)) into `size` big-endian bytes (size 8 or 16). False with OverflowError (out of range)
// or TypeError (not an int) set.
inline bool id_of_int(PyObject* value, std::uint8_t* bytes, std::size_t size) {
  if (!PyLong_Check(value)) {
    PyErr_Format(PyExc_TypeError, "lens: an id is an int, not %s", Py_TYPE(value)->tp_name);
    return false;
  }
  if (size == 8) {
    const unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
    put_big_endian_u64(v, bytes);
    return true;
  }
  PyObject* shift = PyLong_FromLong(64);
  PyObject* high = shift != nullptr ? PyNumber_Rshift(value, shift) : nullptr;
  Py_XDECREF(shift);
  if (high == nullptr) return false;
  const unsigned long long h = PyLong_AsUnsignedLongLong(high);  // OverflowError for a negative or a too large id
  Py_DECREF(high);
  if (h == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
  put_big_endian_u64(h, bytes);
  put_big_endian_u64(PyLong_AsUnsignedLongLongMask(value), bytes + 8);
  return true;
}

}  // namespace lens_python
