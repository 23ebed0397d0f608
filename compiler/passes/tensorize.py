"""Tensorize: loop nests marked with the GEMM intrinsic become GEMM micro-ops.

The marked nest must compute exactly the intrinsic's declaration: loops of
extents (batch, block_out, block_in) — or (batch, block_out) for the
initialisation — around ``acc[.., b, o] += inp[.., b, k] · wgt[.., o, k]``
(``acc[.., b, o] = 0``), with acc, inp and wgt in their scopes and the
three loop variables used nowhere else. The nest is replaced by a
:class:`ir.Gemm` of one micro-op whose indices are the element indices of
the three operands.
"""

from .. import ir
from ..expr import Binary, Const, Load, Var, free_vars, strip_casts
from ..intrin import GemmIntrinsic
from ..schedule import ScheduleError

__all__ = ["TensorizeError", "tensorize"]


class TensorizeError(ScheduleError):
    """A marked nest that does not match the intrinsic (the message says how)."""


def tensorize(func, cfg):
    def rewrite(node):
        if isinstance(node, ir.Attr) and node.key == "tensorize":
            if not isinstance(node.value, GemmIntrinsic):
                raise TensorizeError(f"unknown intrinsic {node.value!r}")
            return _match_gemm(node.body, node.value)
        return None
    return func.with_body(ir.transform(func.body, rewrite))


def _match_gemm(nest, intrin):
    loops, node = ir.loop_nest(nest)
    if not isinstance(node, ir.Store):
        raise TensorizeError(f"the GEMM intrinsic replaces one store, found:\n{node}")
    acc = node.buffer
    extents = dict(loops)
    b_var, o_var = node.indices[-2], node.indices[-1]
    if acc.scope != "acc" or not all(isinstance(v, Var) for v in (b_var, o_var)):
        raise TensorizeError(f"{acc.name}: the result must be an accumulator element [.., b, o]")
    if (extents.get(b_var), extents.get(o_var)) != (intrin.batch, intrin.block_out):
        raise TensorizeError(f"{acc.name}: element loops of extents ({extents.get(b_var)}, {extents.get(o_var)}), "
                             f"the intrinsic has ({intrin.batch}, {intrin.block_out})")
    outer_ok = [v not in (b_var, o_var) for v in free_vars(_index_part(node.indices))]
    if not all(outer_ok):
        raise TensorizeError(f"{acc.name}: b and o may only index the element dimensions")
    value = node.value
    if isinstance(value, Const) and value.value == 0:           # initialisation
        if len(loops) != 2:
            raise TensorizeError(f"{acc.name}: the reset nest must be exactly the (b, o) loops")
        return ir.Gemm(acc, None, None, [ir.Uop(acc.elem_index(node.indices))], reset=True)
    if not (isinstance(value, Binary) and value.op == "+"):
        raise TensorizeError(f"{acc.name}: expected acc + inp · wgt, found {value}")
    first, product = value.a, strip_casts(value.b)
    if not (isinstance(first, Load) and first.source is acc and ir.same_indices(first.indices, node.indices)):
        first, product = value.b, strip_casts(value.a)
    if not (isinstance(product, Binary) and product.op == "*"):
        raise TensorizeError(f"{acc.name}: expected a product of an input and a weight, found {product}")
    x, w = strip_casts(product.a), strip_casts(product.b)
    if isinstance(x, Load) and x.source.scope == "wgt":
        x, w = w, x
    if not (isinstance(x, Load) and isinstance(w, Load) and x.source.scope == "inp" and w.source.scope == "wgt"):
        raise TensorizeError(f"{acc.name}: the operands must come from the inp and wgt buffers, found {product}")
    k_var = x.indices[-1]
    if len(loops) != 3 or extents.get(k_var) != intrin.block_in:
        raise TensorizeError(f"{acc.name}: expected loops (b, o, k) of extents {intrin.loop_extents}, found "
                             + ", ".join(f"{v.name}:{n}" for v, n in loops))
    if x.indices[-2] is not b_var or w.indices[-2] is not o_var or w.indices[-1] is not k_var:
        raise TensorizeError(f"{acc.name}: expected inp[.., b, k] and wgt[.., o, k], found {x} and {w}")
    for load in (x, w):
        if any(v in (b_var, o_var, k_var) for v in free_vars(_index_part(load.indices))):
            raise TensorizeError(f"{load.source.name}: b, o and k may only index the element dimensions")
    for buf, dtype in ((x.source, intrin.inp_dtype), (w.source, intrin.wgt_dtype), (acc, intrin.acc_dtype)):
        if buf.dtype != dtype:
            raise TensorizeError(f"{buf.name} is {buf.dtype}; the GEMM intrinsic takes {dtype} there")
    return ir.Gemm(acc, x.source, w.source,
                   [ir.Uop(acc.elem_index(node.indices), x.source.elem_index(x.indices),
                           w.source.elem_index(w.indices))])


def _index_part(indices):
    """The non-element indices, as one expression for free-variable checks."""
    out = Const(0)
    for i in indices[:-2]:
        out = out + i
    return out
