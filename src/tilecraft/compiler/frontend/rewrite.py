"""What the model rewrites that run before import (`qoperator`, `qonnx`) share: a copy to
rewrite, and the finishing step that puts the new node list in and drops the opsets of the
custom domains no node uses any more."""

from __future__ import annotations


def copy_model(model):
    """A copy of `model` (a ModelProto) and its initializers by name, to rewrite."""
    out = type(model)()
    out.CopyFrom(model)
    return out, {t.name: t for t in out.graph.initializer}


def finish(model, nodes: list, domains: tuple[str, ...]):
    """`model` with `nodes` as its graph's nodes, and without the opset imports of `domains`
    where no node is of them any more."""
    g = model.graph
    del g.node[:]
    g.node.extend(nodes)
    if not any(n.domain in domains for n in g.node):
        kept = [o for o in model.opset_import if o.domain not in domains]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    return model
