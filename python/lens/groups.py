"""Span groups: the run-time switch for how fine a trace is (CONTRACT §1).

`SpanGroup` is the base catalogue: its group names as upper-case string constants, `ALL_GROUPS`, and the presets a
span-group spec may name (`_PRESETS`). A consumer extends it by subclassing, as Megatron-LM does: the subclass adds
constants, puts them in `ALL_GROUPS` and replaces `_PRESETS`. Specs resolve in lens's C++ library, so a spec means
the same, and a typo gives the same message, from Python and from C++::

    class MySpanGroup(SpanGroup):
        DATA = "data"
        ALL_GROUPS = SpanGroup.ALL_GROUPS | {DATA}
        _PRESETS = {"default": frozenset({SpanGroup.JOB}), "all": ALL_GROUPS}

    MySpanGroup.resolve("default, data")   # frozenset({'job', 'data'})

A group's id is its place in the catalogue: the base groups first, then each subclass's new constants in the order
they are written (C++ code in the same process names groups by those ids: lens.megatron.MegatronSpanGroup is taken
whole from the C++ catalogue, so the two always agree).
"""

from lens import _native


class SpanGroup:
    JOB = "job"
    CHECKPOINT = "checkpoint"
    EVALUATE = "evaluate"
    MODEL_INIT = "model_init"
    LOAD_CHECKPOINT = "load_checkpoint"
    STEP = "step"
    FORWARD_BACKWARD = "forward_backward"
    OPTIMIZER = "optimizer"

    ALL_GROUPS = frozenset(
        {JOB, CHECKPOINT, EVALUATE, MODEL_INIT, LOAD_CHECKPOINT, STEP, FORWARD_BACKWARD, OPTIMIZER})
    _PRESETS = {
        "default": frozenset({JOB, CHECKPOINT, EVALUATE}),
        "per_step": ALL_GROUPS,
        "all": ALL_GROUPS,
        "profiling": ALL_GROUPS,
        "full": ALL_GROUPS,
    }

    @classmethod
    def group_order(cls):
        """The catalogue's groups in id order."""
        order = []
        for klass in reversed(cls.__mro__):
            for attribute, value in vars(klass).items():
                if attribute.isupper() and isinstance(value, str) and value in cls.ALL_GROUPS and value not in order:
                    order.append(value)
        order.extend(sorted(set(cls.ALL_GROUPS) - set(order)))
        return order

    @classmethod
    def _catalogue(cls):
        """(groups, presets) as lens's C++ catalogue takes them."""
        presets = [(name, sorted(members)) for name, members in cls._PRESETS.items()]
        return cls.group_order(), presets

    @classmethod
    def resolve(cls, spec, source="span-group spec"):
        """The groups a spec names (presets, groups, `-name` removals), as a frozenset of names.

        An unknown name raises lens.ConfigError (a ValueError) naming `source`, the name, every valid name and the
        closest one."""
        groups, presets = cls._catalogue()
        return frozenset(_native.resolve(groups, presets, spec or "", source))
