/* SPDX-License-Identifier: MIT */
/* Small language helpers shared by every part of kvdist: cleanup attributes, ownership transfer. */
#pragma once

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _unused_ __attribute__((unused))
#define _pure_ __attribute__((pure))
#define _likely_(x) (__builtin_expect(!!(x), 1))
#define _unlikely_(x) (__builtin_expect(!!(x), 0))
#define _public_ __attribute__((visibility("default")))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Round @x up to a multiple of @a, a power of two. */
#define ALIGN_POW2(x, a) (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))

/* Hand a pointer or fd on: returns the value and leaves NULL / -1 behind. */
#define TAKE_PTR(p)                                                                                \
        ({                                                                                         \
                __typeof__(p) _p_ = (p);                                                           \
                (p) = NULL;                                                                        \
                _p_;                                                                               \
        })
#define TAKE_FD(fd)                                                                                \
        ({                                                                                         \
                int _fd_ = (fd);                                                                   \
                (fd) = -1;                                                                         \
                _fd_;                                                                              \
        })

static inline void freep(void *p)
{
        free(*(void **)p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline int safe_close(int fd)
{
        if (fd >= 0) {
                int saved = errno;
                (void)close(fd);
                errno = saved;
        }
        return -1;
}

static inline void closep(int *fd)
{
        safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

/* Defines name##p(type **) calling func on a non-NULL pointer, for _cleanup_(). */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                    \
        static inline void func##p(type **p)                                                       \
        {                                                                                          \
                if (*p)                                                                            \
                        (void)func(*p);                                                            \
        }

/* Multiplication and addition that report overflow instead of wrapping. */
#define MUL_OVERFLOW(a, b, r) __builtin_mul_overflow(a, b, r)
#define ADD_OVERFLOW(a, b, r) __builtin_add_overflow(a, b, r)
