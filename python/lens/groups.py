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

import threading

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


ALL = "all"  # the preset that always means every group


class SpanRegistry:
    """Span groups declared by the libraries of a process, by namespace (NeMo Lens's registry, its successor of
    subclassing SpanGroup)::

        SpanRegistry.register("megatron", groups={"step", "microbatch"},
                              presets={"default": {"step"}, "per_step": {"step", "microbatch"}})

    Presets union across namespaces; a preset may name any group already registered; "all" is reserved. setup
    resolves a config whose span_group_cls is the base SpanGroup with span_group_cls(): SpanGroup's groups and
    presets plus every registered one. resolve() reports names nothing registered instead of raising (a job-wide
    spec may name groups of libraries this process does not import); setup itself, as everywhere in lens, refuses
    an unknown name (CONTRACT §1)."""

    _lock = threading.Lock()
    _groups = {}   # namespace -> frozenset of group names
    _presets = {}  # namespace -> {preset: frozenset of group names}

    @classmethod
    def register(cls, namespace, groups, presets=None, *, allow_override=False):
        """Declares the groups `namespace` emits. ValueError: an empty namespace or group name, a group or preset
        named "all", a preset naming a group no namespace registered, or (without allow_override) a namespace or
        group registered already. Re-registering replaces the namespace whole."""
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("Namespace must be a non-empty string.")
        names = frozenset(groups)
        if any(not isinstance(name, str) or not name for name in names):
            raise ValueError(f"Namespace {namespace!r} registered an empty group name.")
        if ALL in names:
            raise ValueError(f"Group name {ALL!r} is reserved; it always means every group.")
        with cls._lock:
            if namespace in cls._groups and not allow_override:
                raise ValueError(f"Namespace {namespace!r} is already registered. Pass allow_override=True.")
            others = {name for other, owned in cls._groups.items() if other != namespace for name in owned}
            if names & others and not allow_override:
                raise ValueError(f"Group(s) {sorted(names & others)} already registered by another namespace. "
                                 f"Pass allow_override=True.")
            known = others | names | set(SpanGroup.ALL_GROUPS)
            checked = {}
            for preset, members in (presets or {}).items():
                members = frozenset(members)
                if preset == ALL:
                    raise ValueError(f"Preset name {ALL!r} is reserved; it always means every group.")
                if members - known:
                    raise ValueError(f"Preset {preset!r} of {namespace!r} names unregistered group(s) "
                                     f"{sorted(members - known)}.")
                checked[preset] = members
            cls._groups[namespace] = names
            cls._presets[namespace] = checked

    @classmethod
    def unregister(cls, namespace):
        with cls._lock:
            if namespace not in cls._groups:
                raise ValueError(f"Namespace {namespace!r} is not registered.")
            del cls._groups[namespace], cls._presets[namespace]

    @classmethod
    def clear(cls):
        with cls._lock:
            cls._groups.clear()
            cls._presets.clear()

    @classmethod
    def groups(cls):
        with cls._lock:
            return frozenset(name for owned in cls._groups.values() for name in owned)

    @classmethod
    def namespaces(cls):
        with cls._lock:
            return sorted(cls._groups)

    @classmethod
    def presets(cls):
        """Each preset's groups, unioned across namespaces, and "all"."""
        with cls._lock:
            merged = {}
            for presets in cls._presets.values():
                for preset, members in presets.items():
                    merged[preset] = merged.get(preset, frozenset()) | members
            merged[ALL] = frozenset(name for owned in cls._groups.values() for name in owned)
            return merged

    @classmethod
    def span_group_cls(cls):
        """A SpanGroup subclass of SpanGroup's groups and presets and every registered one (what setup uses)."""
        registered = sorted(cls.groups() - SpanGroup.ALL_GROUPS)
        presets = {name: frozenset(members) for name, members in SpanGroup._PRESETS.items()}
        for name, members in cls.presets().items():
            presets[name] = presets.get(name, frozenset()) | members
        presets[ALL] = SpanGroup.ALL_GROUPS | frozenset(registered)
        attributes = {name.upper(): name for name in registered}
        attributes.update(ALL_GROUPS=presets[ALL], _PRESETS=presets)
        return type("RegisteredSpanGroup", (SpanGroup,), attributes)

    @classmethod
    def resolve(cls, spec):
        """(the groups `spec` names, the names in it that nothing registered): never raises for an unknown name."""
        group_cls = cls.span_group_cls()
        known = set(group_cls.ALL_GROUPS) | set(group_cls._PRESETS)
        parts = [part.strip() for part in (spec or "").split(",") if part.strip()]
        unknown = frozenset(part.lstrip("-") for part in parts if part.lstrip("-") not in known)
        kept = ",".join(part for part in parts if part.lstrip("-") in known)
        return (group_cls.resolve(kept) if kept else frozenset()), unknown
