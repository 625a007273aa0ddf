"""ptolab's modeled NPU: config specs, the kernel compiler and the machine model.

Pure library code: nothing in ``simcore`` knows a PyPTO file format; ``pipeline``
turns its results into files.
"""
