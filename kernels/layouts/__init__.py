"""Layouts: where a tile's elements lie, in shared memory and in the lanes' registers.

  tiles        a tile of a bf16 matrix in shared memory, its 16-byte chunks swizzled (the
               ldmatrix and the wgmma layouts), the copy of one in, wgmma descriptors
  fragments    the mma operand fragments out of a tile, by ldmatrix
  tensor_maps  how the bulk tensor copies see a matrix in global memory
"""
