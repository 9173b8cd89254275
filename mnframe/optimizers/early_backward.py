"""``Variable.backward`` that hands over each parameter as soon as its gradient is final.

Chainer has no per-parameter gradient hooks: its backward keeps every leaf's
gradient in a private table and sets all of them on the variables at the very
end, and a ``FunctionHook`` never sees them. Averaging a bucket while backward
still runs (``mnframe.optimizers.overlap``) needs them earlier, so this module
is mnframe's own driver of the backward pass. It is Chainer 7's
``chainer._backprop._backprop_to_all`` step for step (the same function nodes,
in the same order, through the same ``backprop_step`` and function hooks, so
every gradient is bitwise Chainer's) with one addition: before the pass it
counts, for every leaf, the function nodes of the graph that consume it; when
the last of them has run, the leaf's gradient can no longer change, so it is set
on the variable at once and ``on_final(variable)`` is called. Leaves whose
consumers are never reached (a ``None`` gradient upstream) are set at the end,
as Chainer does. Nothing of Chainer is patched: the optimizer calls this instead
of ``loss.backward`` (``MultiNodeOptimizer.update(lossfun)`` only).
"""

import collections
import heapq

import chainer
from chainer import _backprop_utils, backend


def supported(loss):
    """True when this driver can run ``loss``'s backward (not ChainerX, and ``loss`` has a creator)."""
    return not loss._has_chainerx_array and loss.creator_node is not None


def _consumer_counts(root):
    """{leaf variable node: number of function nodes of the graph that take it as a differentiable input}."""
    counts = collections.Counter()
    seen = {root}
    stack = [root]
    while stack:
        func = stack.pop()
        for x in {x for x in func.inputs if x.requires_grad}:
            creator = x.creator_node
            if creator is None:
                counts[x] += 1
            elif creator not in seen:
                seen.add(creator)
                stack.append(creator)
    return counts


def backward(loss, loss_scale=None, on_final=None):
    """``loss.backward(loss_scale=loss_scale)``, calling ``on_final(var)`` for each leaf variable
    (parameter) as soon as its gradient is final and set; returns the leaves not handed over early."""
    if not supported(loss):
        loss.backward(loss_scale=loss_scale)
        return None
    # Variable.backward's prelude: a scalar loss starts from ones (times loss_scale)
    if loss.array.size == 1 and loss.grad_var is None:
        with chainer.using_device(loss.device):
            loss.grad = loss.device.xp.ones_like(loss.array)
        if loss_scale is not None:
            loss.grad *= loss_scale
    node, grad_var = loss.node, loss.grad_var
    loss.grad_var = None
    with chainer.using_config("enable_backprop", False):
        return _backprop(node, grad_var, loss_scale, on_final or (lambda _var: None))


def _set_leaf(x, grads, loss_scale):
    var = x.get_variable_or_none()
    gx = grads.pop(x)
    if var is not None:
        var._set_grad_var_without_check(gx)
        var._loss_scale = loss_scale
    return var


def _backprop(y, gy, loss_scale, on_final):
    """Chainer's ``_backprop_to_all([(y, gy)], False, loss_scale)`` plus early leaves (see the module doc)."""
    cand_funcs, seen_set = [], set()

    def add_cand(cand):
        if cand not in seen_set:
            heapq.heappush(cand_funcs, (-cand.rank, len(seen_set), cand))
            seen_set.add(cand)

    grads = _backprop_utils.GradTable(accumulate_grad_inputs=True)
    leaf_nodes = set()
    grads.accumulate(y, gy)
    add_cand(y.creator_node)
    remaining = _consumer_counts(y.creator_node)
    del y

    is_debug = chainer.is_debug()
    base_hooks = chainer.get_function_hooks().values()
    while cand_funcs:
        _, _, func = heapq.heappop(cand_funcs)
        in_grad = _backward_step(func, grads, base_hooks, is_debug)
        if in_grad is None:
            continue
        final = _route_input_grads(func, in_grad, remaining, leaf_nodes, add_cand)
        del in_grad
        for x in final:  # no function left in the graph adds to these gradients: hand them over now
            if x in leaf_nodes:
                leaf_nodes.remove(x)
                var = _set_leaf(x, grads, loss_scale)
            else:
                var = x.get_variable_or_none()
            if var is not None:
                on_final(var)
    late = []
    for x in leaf_nodes:
        var = _set_leaf(x, grads, loss_scale)
        if var is not None:
            late.append(var)
    grads.assert_no_grads()
    return late


def _backward_step(func, grads, base_hooks, is_debug):
    """One function node's backward with the function hooks (Chainer's loop body): the input
    gradients by input node, or None when no input needs a gradient."""
    inputs = func.inputs
    target_input_indexes = tuple([i for i, x in enumerate(inputs) if x.requires_grad])
    outputs = [o() for o in func.outputs]
    out_grad = tuple([grads.pop(o) if o is not None and o.creator_node is not None else None for o in outputs])
    if not target_input_indexes:
        return None
    in_data = [x.data for x in inputs]
    out_grad_array = [None if g is None else g.raw_array for g in out_grad]
    if func._n_local_function_hooks != 0:
        local_hooks = collections.OrderedDict(chainer.get_function_hooks())
        local_hooks.update(func.local_function_hooks)
        hooks = local_hooks.values()
    else:
        hooks = base_hooks
    with chainer.using_device(backend.get_device_from_array(*(in_data + out_grad_array))):
        for hook in hooks:
            hook.backward_preprocess(func, tuple(in_data), tuple(out_grad_array))
        target_inputs = [inputs[i] for i in target_input_indexes]
        in_grad = collections.OrderedDict()
        for x in target_inputs:
            if x not in in_grad:
                in_grad[x] = grads.get_as_list(x)
        _backprop_utils.backprop_step(func, target_input_indexes, out_grad, in_grad, is_debug)
        for hook in hooks:
            hook.backward_postprocess(func, tuple(in_data), tuple(out_grad_array))
    return in_grad


def _route_input_grads(func, in_grad, remaining, leaf_nodes, add_cand):
    """Check ``func``'s input gradients, queue the creators of non-leaf inputs, note the leaves;
    returns the leaves no function left in the graph adds to."""
    final = []
    for x, gx in in_grad.items():
        leaf = x.creator_node is None
        if leaf:
            remaining[x] -= 1
            if remaining[x] == 0:
                final.append(x)
        if not gx:
            continue
        for gx_elem in gx:
            if gx_elem is not None:
                chainer.variable._check_grad_type(func, x, True, gx_elem.raw_array)
        if leaf:
            leaf_nodes.add(x)
        else:
            add_cand(x.creator_node)
    return final
