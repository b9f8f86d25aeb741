"""numba.cuda kernels, one module per op family, each kernel beside its backward and its
launcher. Installed as ``microgpt.kernels``; the NumPy twin of ``<op>_forward`` here is
``microgpt.reference.<op>_forward``. Importing this package compiles nothing."""
