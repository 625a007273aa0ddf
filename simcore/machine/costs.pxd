# Types for compiling costs.py with Cython (pure-Python mode): the engine prices HBM
# sharing through Mte2Model.rates on every loader change.  Declarations only.
cimport cython

@cython.final
cdef class Mte2Model:
    cdef public double fixed_us, l2_fixed_us, burst_us, core_rate, aic_core_rate
    cdef public double hbm_rate, l2_rate
    cdef public double aiv_copy_us, aic_copy_us
    cdef public list caps

    @cython.locals(cap_v=double, cap_c=double, n=long, hcap_v=double, hcap_c=double,
                   share=double, rest=double)
    cpdef (double, double) rates(self, long n_aiv, long n_aic, double over_v=*,
                                 double over_c=*)
