# Types for compiling l2.py with Cython (pure-Python mode): the .py stays the source and
# runs as it is when not compiled.  Declarations only; no logic lives here.
cimport cython

cdef extern from *:
    int __builtin_popcountll(unsigned long long) nogil

cdef int _bits(unsigned long x)

@cython.final
cdef class L2Cache:
    cdef public double capacity
    cdef public long capacity_lines, used_lines, line_bytes
    cdef public object accesses
    cdef const long[::1] ptr, region, nlines
    cdef const double[::1] nbytes
    cdef const unsigned long[::1] lines
    cdef const signed char[::1] write, bypass
    cdef signed char[::1] present
    cdef unsigned long[::1] held
    cdef long[::1] after, before, order
    cdef long end
    cdef public long count
    cdef public bint random
    cdef public unsigned long rng

    @cython.locals(a=long, r=long, last=long, prev=long, nxt=long, used=long, cap=long,
                   line=long, fresh=long, hit=double, miss=double, missed=double,
                   size=double, count=long, end=long,
                   mask="unsigned long", held="unsigned long", new="unsigned long",
                   kept="unsigned long", region=long)
    cpdef (double, double) access(self, long task)

    @cython.locals(cap=long, victim=long, end=long)
    cdef long _evict(self, long used) except? -1

    @cython.locals(place=long, last=long, prev=long, nxt=long)
    cdef void _unlink(self, long region)

    @cython.locals(x="unsigned long")
    cdef unsigned long _draw(self)
