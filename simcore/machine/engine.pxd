# Types for compiling engine.py with Cython (pure-Python mode): the .py stays the source
# and runs as it is when not compiled (the reference engine).  Declarations only; no logic
# lives here.  setup.py builds it; tests/test_engine_compiled.py holds both to identical
# Timelines.
cimport cython
from simcore.machine.costs cimport Mte2Model
from simcore.machine.l2 cimport L2Cache

cdef long AIV, AIC
cdef long _DONE, _READY, _JOIN, _DRAIN, _NOTICE, _START

# Heap and TaskQueue methods are cpdef so tests can hold them to heapq and deque
@cython.final
cdef class Heap:
    cdef public long n
    cdef long seq, cap
    cdef list items
    cdef double[::1] key
    cdef long[::1] order, a, b, c

    cdef void _grow(self) except *
    @cython.locals(seq=long, i=long)
    cpdef void push(self, double key, long a, long b, long c) except *
    @cython.locals(up=long, k=double)
    cdef inline void _rise(self, long i, double key, long seq, long a, long b, long c) noexcept
    @cython.locals(n=long, key=double, seq=long, i=long, child=long, right=long)
    cpdef (double, long, long, long, long) pop(self) except *
    cpdef double first_key(self) except? -1.0

@cython.final
cdef class TaskQueue:
    cdef public long head, tail
    cdef long[::1] items
    @cython.locals(n=long)
    cpdef void append(self, long task) except *
    @cython.locals(task=long)
    cpdef long pop(self) except? -1
    @cython.locals(task=long)
    cpdef long popleft(self) except? -1

# Cores and Run keep a __dict__: an attribute added to engine.py but not declared here
# still works (at Python speed) instead of failing, so engine.py changes merge safely
@cython.final
cdef class Cores:
    cdef dict __dict__
    cdef long n, n_threads, next_thread
    cdef bint fair
    cdef long[::1] idle, idle_of, pend_q, pend_head, pend_len, n_pend
    cdef long[::1] n_idle, n_pend_all, pending
    cdef signed char[::1] queued, busy, unnoticed, ended_twice, idled_early

    @cython.locals(n=long, k=long, th=long)
    cdef long _round(self, long[::1] counts, long core_type) except? -2
    @cython.locals(th=long, first=double, lowest=long, t=long, f=double, c=long, g=long,
                   n=long)
    cdef long take_idle(self, long core_type, double[::1] free, long batch) except? -2
    @cython.locals(th=long, key=double, t=long)
    cdef long take_any_pend(self, long core_type, double[::1] free, long batch) except? -2
    @cython.locals(g=long, left=long, core=long)
    cdef long take_own_idle(self, long th, long core_type) except? -2
    @cython.locals(g=long, n=long)
    cdef void slot_free(self, long core, long th, long core_type) except *
    @cython.locals(g=long, n=long, head=long, core=long)
    cdef long take_pend(self, long th, long core_type) except? -2
    cdef bint has_pend(self, long th, long core_type) except -1
    @cython.locals(t=long)
    cdef bint other_idle(self, long th, long core_type) except -1
    cdef void stop(self, long core, long th, long core_type) except *
    @cython.locals(g=long)
    cdef void go_idle(self, long core, long th, long core_type) except *

@cython.final
cdef class Run:
    cdef dict __dict__
    cdef public object plan
    cdef public list sched
    cdef L2Cache l2
    cdef long[::1] indegree
    cdef double[::1] thread_free
    cdef Heap events
    cdef long running
    cdef tuple queues
    cdef bint lifo
    cdef Cores cores
    cdef tuple loaders
    cdef long[::1] n_loaders
    cdef double[::1] fetched, asked, drained, rate, caps
    cdef double drained_at, next_drained, end_of_dev
    cdef long version
    cdef double[::1] first_send, last_send, pass_start
    cdef long[::1] dispatches
    cdef object task_core, task_start, task_end, task_mte2, task_hbm, task_l2, task_asked
    cdef object task_drain, task_joined, task_stream_floor
    cdef long[::1] core_of
    cdef double[::1] start_of, end_of, mte2_of, hbm_of, l2_of, asked_of, drain_of, joined_of
    cdef double[::1] stream_floor
    cdef long n_threads, n_tasks
    cdef bint direct_send, fair
    cdef const long[::1] core_type, succ_ptr, succ
    cdef double dispatch_us, completion_us, resolve_edge_us, handoff_us, ready_edge_us
    cdef Mte2Model mte2
    cdef double fixed_us, l2_fixed_us, l2_rate, core_rate, aic_core_rate, hbm_total
    cdef double head_us
    cdef double[::1] cold_us
    cdef const double[::1] setup_us_of, loads, in_flight, static_sum, static_max
    cdef const double[::1] write_bytes, write_pipe, read_bytes

    @cython.locals(n_threads=long, th=long, task=long, now=double, kind=long, a=long,
                   b=long, events=Heap, queues=tuple, core_type="const long[::1]",
                   q=TaskQueue, aic=TaskQueue, aiv=TaskQueue)
    cpdef double run_dev_task(self, long k, double start) except? -1.0
    @cython.locals(waiting=long, th=long, sent=double, f=double, cores=Cores)
    cdef bint on_task_done(self, double now, long task, long core) except -1
    @cython.locals(went_on=bint, th=long, f=double, ct=long, g=long, direct=bint, lo=long,
                   hi=long, noticed=double, s=long, c=long, at=double, ready=list,
                   rest=list, cores=Cores, i=long, last=long, readied=list, edges=long,
                   n_tasks=long, j=long, h=long)
    cdef void on_notice(self, double now, long task, long core) except *
    @cython.locals(cores=Cores, ct=long, c=long)
    cdef bint send_directly(self, long task, long th, double now) except -1
    @cython.locals(q=TaskQueue)
    cdef void on_task_ready(self, double now, long task) except *
    @cython.locals(cores=Cores, n=long, core_type=long, batch=long, core=long,
                   i=long, lifo=bint, q=TaskQueue, queues=tuple)
    cdef void dispatch(self, double now) except *
    @cython.locals(th=long, f=double, at=double)
    cdef double send(self, long core, double now) except? -1.0
    cdef void start_task(self, long task, long core, double now) except *
    cdef void pend_task(self, long task, long core, double now) except *
    @cython.locals(delay=double)
    cdef void begin(self, long t, long core, double at) except *
    @cython.locals(hit=double, miss=double, latency=double, l2=double, asked=double,
                   fixed=double, floor=double, cap=double)
    cdef void start_work(self, long t, long core, double at) except *
    @cython.locals(dt=double)
    cdef void _advance(self, double now) except *
    @cython.locals(n_v=long, n_c=long, over_v=double, over_c=double, cap_v=double,
                   cap_c=double, rate_v=double, rate_c=double)
    cdef bint _rates(self) except -1
    @cython.locals(best=double, best_type=long, ct=long, dt=double, done=double,
                   heap=Heap, loaders=tuple)
    cdef void _next_drained(self, double now) except *
    @cython.locals(ct=long, heap=Heap, asked=double, target=double)
    cdef void on_join(self, double now, long t, long core) except *
    @cython.locals(heap=Heap, start=double, floor=double)
    cdef void on_drained(self, double now, long version, long ct) except *
    @cython.locals(wb=double, written=double, reads=double, extra=double, n=double,
                   end=double, busiest=double)
    cdef void finish(self, long t, long core, double start, double mte2,
                     double drain=*) except *
