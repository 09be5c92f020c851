// lens/internal/visibility.h: symbol visibility and inlining macros. Not for users.
//
// The library is compiled with hidden visibility; only what a consumer may call is marked LENS_API.
#pragma once

#if defined(LENS_BUILDING_LIBRARY)
#define LENS_API __attribute__((visibility("default")))
#else
#define LENS_API
#endif

// The hot paths (the group check, span start and end) must never become a call.
#define LENS_ALWAYS_INLINE inline __attribute__((always_inline))
// The same for a lambda: [](int x) LENS_ALWAYS_INLINE_LAMBDA { ... }.
#define LENS_ALWAYS_INLINE_LAMBDA __attribute__((always_inline))

// Public API compiled under LENS_DISABLED lives in its own inline namespace, so a program that mixes
// disabled and enabled translation units never merges two different definitions of one name.
#if defined(LENS_DISABLED)
#define LENS_ABI_NAMESPACE_BEGIN inline namespace disabled {
#define LENS_ABI_NAMESPACE_END }
#else
#define LENS_ABI_NAMESPACE_BEGIN
#define LENS_ABI_NAMESPACE_END
#endif
