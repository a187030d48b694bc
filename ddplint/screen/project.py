"""The join: every module's facts (``ddplint.screen.facts``) made into one project.

Rules ask the project questions such as "is this function only ever called
under a rank guard?", "is ``set_epoch`` called anywhere the entry script
reaches?", "is this parameter a DDP model at some call site?".

When a fact is unknown (a dynamic call, code outside the project) the answers
say so (``None`` / ``complete = False``) and rules stay silent.
"""

from __future__ import annotations

import functools
import os
import posixpath
from typing import Callable, Iterable, Optional

from ddplint import names
from ddplint.screen.facts import (ARGV_LOCAL_RANK, DDP_MODEL, FACTORY_CALL, FLAG_PREFIX, FSDP_MODEL, LOCAL_RANK_ATTRIBUTE,
                                  PARAM_PREFIX, REGISTRY_CALL,
                                  RETURN_PREFIX, SELF_ATTRIBUTE_PREFIX, SET_BY_CALLEE_PREFIX, TRUE,
                                  UNKNOWN, CallFact, FunctionFacts, ModuleFacts)

# ---------------------------------------------------------------------- the join
FunctionKey = tuple[str, str]  # (module path, function name)
_SET_LOCAL_RANK = f"{SET_BY_CALLEE_PREFIX}local_rank:"  # ``args.local_rank`` after ``setup(args)``


class Project:
    """The joined facts of the linted modules; rules query it."""

    def __init__(self, modules: Iterable[ModuleFacts], complete: bool = True) -> None:
        self.modules: dict[str, ModuleFacts] = {m.path: m for m in modules}
        # False: modules of the project exist that were not seen. The engine always
        # joins the whole project root, and a text linted alone is a project of
        # its own, so both are complete (third-party imports are not the project).
        self.complete = complete
        self._by_suffix: dict[tuple[str, ...], list[str]] = {}
        for path in self.modules:
            parts = _module_parts(path)
            for start in range(len(parts)):
                self._by_suffix.setdefault(tuple(parts[start:]), []).append(path)
        self._nearest: dict[tuple[str, tuple[str, ...]], str] = {}
        self.callers: dict[FunctionKey, list[tuple[str, CallFact]]] = {}
        # Calls through an instance whose class the facts cannot name (``trainer =
        # REGISTRY[kind](args)``; ``self.task.train_epoch(model=...)``) that pass
        # a model on: linked by method name when one method of the project has it.
        # They only carry wrapped models into parameters (see _by_method_name).
        self.weak_callers: dict[FunctionKey, list[tuple[str, CallFact]]] = {}
        self._link_calls()
        self.ddp_params: dict[FunctionKey, dict[str, str]] = {}  # param -> "ddp"/"fsdp"
        for path, module in self.modules.items():  # ``model: FSDP``: what the author says callers pass
            for name, function in module.functions.items():
                for param, kind in function.annotated_wrapped.items():
                    self.ddp_params.setdefault((path, name), {}).setdefault(param, kind)
        self._propagate_wrapped_params()
        # function -> the parameters one of which must be true for it to reach a collective
        # (empty: it reaches one whatever its callers pass)
        self._reaches_collective: dict[FunctionKey, frozenset[str]] = {}
        self._propagate_collectives()
        self._forwards = self._propagate_param_use("forwards")
        self._loads = self._propagate_param_use("loads")
        self._saves_state: set[FunctionKey] = set()
        self._resolve_flagged_saves()
        self._saves = self._propagate_saves("saves", through_guards=True)
        self._saves_unguarded = self._propagate_saves("saves_unguarded", through_guards=False)
        self._context: dict[str, bool] = {}
        # The module graph: M -> N when M imports N (``import``, ``from``, ``*``) or
        # calls into it (spawn targets included).
        self.imported: dict[str, set[str]] = self._link_imports()
        self.reaches: dict[str, set[str]] = self._link_modules()
        self._scopes: dict[str, frozenset[str]] = {}
        self._param_values: dict[tuple[FunctionKey, str], frozenset[str]] = {}

    # ------------------------------------------------------------------ resolution
    def resolve_module(self, importer: str, target: str) -> Optional[str]:
        """The project path of module ``target`` ("pkg.mod", ".mod", "..") imported
        from ``importer``; None when it is not in the linted set."""
        level = len(target) - len(target.lstrip("."))
        dotted = target[level:]
        parts = tuple(p for p in dotted.split(".") if p)
        if level:
            base = os.path.dirname(os.path.normpath(importer))
            for _ in range(level - 1):
                base = os.path.dirname(base)
            for candidate in (os.path.join(base, *parts) + ".py",
                              os.path.join(base, *parts, "__init__.py")):
                if os.path.normpath(candidate) in self._normalised:
                    return self._normalised[os.path.normpath(candidate)]
            return None
        if not parts:
            return None
        found = self._by_suffix.get(parts)
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        importer_dir = os.path.dirname(importer)
        key = (importer_dir, parts)
        if key not in self._nearest:  # the candidate nearest the importer wins
            self._nearest[key] = min(found, key=lambda p: (_distance(importer_dir, p), p))
        return self._nearest[key]

    @property
    def _normalised(self) -> dict[str, str]:
        if not hasattr(self, "_norm_cache"):
            self._norm_cache = {os.path.normpath(p): p for p in self.modules}
        return self._norm_cache

    def resolve_function(self, path: str, callee: str,
                         imports: Optional[dict[str, str]] = None) -> Optional[FunctionKey]:
        """The project function that ``callee`` (dotted, as written in module
        ``path``) names, or None when unknown: a function ("train",
        "engine.train"), a method through its class or the class's project bases
        ("Trainer.fit", "engine.Trainer.fit"), a constructor ("Trainer" ->
        "Trainer.__init__"), or ``self.m`` when one class of the module has ``m``."""
        module = self.modules.get(path)
        if module is None:
            return None
        if FACTORY_CALL in callee:
            made = self.factory_methods(path, callee, imports)
            return made[0] if len(made) == 1 else None
        imports = module.imports if imports is None else imports
        head, _, method = callee.partition(".")
        if head in ("self", "cls") and "." not in method:
            return self._unique_method(path, method)
        found = self._definition(path, callee, imports)
        if found is not None:
            if found[1] in self.modules[found[0]].functions:
                return found
            return self._method(found, "__init__")  # a class: its constructor
        holder, _, method = callee.rpartition(".")
        owner = self._definition(path, holder, imports) if holder else None
        if owner is not None and owner[1] in self.modules[owner[0]].classes:
            return self._method(owner, method)
        return None

    def resolve_functions(self, path: str, callee: str,
                          imports: Optional[dict[str, str]] = None) -> list[FunctionKey]:
        """Every project function a call of ``callee`` may run: the one that
        ``resolve_function`` finds, or, for a method of what a factory returns
        ("build_trainer().train"), that method of each class the factory may build."""
        if FACTORY_CALL in callee:
            return self.factory_methods(path, callee, imports)
        if callee.endswith(REGISTRY_CALL):
            return self.registered_functions(path, callee[:-len(REGISTRY_CALL)])
        key = self.resolve_function(path, callee, imports)
        return [key] if key is not None else []

    def registered_functions(self, path: str, registry: str) -> list[FunctionKey]:
        """The functions of the project registered in the registry object that
        ``registry`` names in module ``path`` (``@PIPELINE_DICT.register_module``
        anywhere, with the same object: a105 visualDet3D's training pipelines)."""
        home = self._variable_home(path, registry)
        if home is None:
            return []
        found = []
        for other_path, module in self.modules.items():
            for written, functions in module.registered.items():
                if self._variable_home(other_path, written) == home:
                    found += [(other_path, name) for name in functions if name in module.functions]
        return found

    def _variable_home(self, path: str, name: str, depth: int = 0) -> Optional[tuple[str, str]]:
        """(module, name) where the module-level name ``name`` (dotted, as written in
        module ``path``) is defined, following imports of project modules; None when
        it comes from outside the project."""
        module = self.modules.get(path)
        if module is None or depth > 4:
            return None
        head, _, rest = name.partition(".")
        if head not in module.imports:
            return (path, name)
        target = module.imports[head] + ("." + rest if rest else "")
        level = len(target) - len(target.lstrip("."))
        pieces = target[level:].split(".")
        for split in range(len(pieces) - 1, -1 if level else 0, -1):
            resolved = self.resolve_module(path, "." * level + ".".join(pieces[:split]))
            if resolved is not None and resolved != path:
                return self._variable_home(resolved, ".".join(pieces[split:]), depth + 1)
        return None

    def factory_methods(self, path: str, callee: str,
                        imports: Optional[dict[str, str]] = None) -> list[FunctionKey]:
        """``trainer.train(model)`` with ``trainer = build_trainer(args)`` (callee
        "build_trainer().train"): method ``train`` of each class that every return
        of the project function ``build_trainer`` constructs (FunctionFacts.returns_classes)."""
        factory, _, method = callee.partition(FACTORY_CALL)
        made = self._definition(path, factory, self.modules[path].imports if imports is None else imports) \
            if path in self.modules else None
        if made is not None and made[1] in self.modules[made[0]].classes:
            # ``trainer = trainer_wBert(...)``: a project class with a lower-case name (a102 E-Zero)
            target = self._method(made, method)
            return [target] if target is not None else []
        key = self.resolve_function(path, factory, imports)
        function = self.function(key) if key is not None else None
        if function is None or not function.returns_classes:
            return []
        found = []
        for cls in function.returns_classes:
            owner = self._definition(key[0], cls)
            if owner is None or owner[1] not in self.modules[owner[0]].classes:
                return []  # a class the project does not hold: the call may run anything
            target = self._method(owner, method)
            if target is None:
                return []
            found.append(target)
        return sorted(set(found))

    def builds_instance_of(self, path: str, callee: str, imports: Optional[dict[str, str]], word: str) -> bool:
        """Does a call of ``callee`` (as written in module ``path``) build an instance
        of a project class one of whose bases, followed through the project, names
        ``word`` ("IterableDataset")? The class itself, or every class a factory
        function returns (``Dataset(...)`` handing back a ``Processor(IterableDataset)``)."""
        found = self._definition(path, callee, imports)
        if found is None:
            return False
        module = self.modules[found[0]]
        if found[1] in module.functions:
            owners = [self._definition(found[0], cls) for cls in module.functions[found[1]].returns_classes]
        else:
            owners = [found] if found[1] in module.classes else []
        return bool(owners) and all(owner is not None and self._derives_from(owner, word) for owner in owners)

    def plain_subclass_of(self, path: str, callee: str, imports: Optional[dict[str, str]], word: str) -> bool:
        """Does ``callee`` (as written in module ``path``) name a project class derived
        from a base that names ``word`` ("DataLoader") that defines no ``__init__`` on
        the way (``class DataLoaderX(DataLoader): def __iter__(...)``)? Its calls take
        the base's arguments: a call of it is a call of the base."""
        found = self._definition(path, callee, imports)
        if found is None or found[1] not in self.modules[found[0]].classes:
            return False
        return self._derives_from(found, word, keeping_init=True)

    def builds_rank_sharded(self, path: str, callee: str, imports: Optional[dict[str, str]]) -> bool:
        """Does ``callee`` (as written in module ``path``) name a project class that
        keeps its rank's slice of the data itself (ModuleFacts.rank_sharding_classes),
        or a project function every return of which is such a class or an instance
        of one (``create_dataset(cfg)`` returning ``DatasetDDP``)?"""
        found = self._definition(path, callee, imports)
        if found is None:
            return False
        module = self.modules[found[0]]
        if found[1] in module.classes:
            owners = [found]
        elif found[1] in module.functions:
            function = module.functions[found[1]]
            owners = [self._definition(found[0], cls)
                      for cls in (*function.returns_classes, *function.returns_class_objects)]
        else:
            return False
        return bool(owners) and all(owner is not None and owner[1] in self.modules[owner[0]].rank_sharding_classes
                                    for owner in owners)

    def _derives_from(self, owner: tuple[str, str], word: str, depth: int = 0, keeping_init: bool = False) -> bool:
        """Does a base of class ``owner``, followed through the project, name ``word``? With
        ``keeping_init``: a base whose last name is ``word``, and no class on the way defines
        ``__init__``."""
        path, cls = owner
        if keeping_init and f"{cls}.__init__" in self.modules[path].functions:
            return False
        for base in self.modules[path].classes.get(cls, ()):
            if (base.rsplit(".", 1)[-1] == word) if keeping_init else (word in base):
                return True
            parent = self._definition(path, base) if depth < 4 else None
            if parent is not None and parent[1] in self.modules[parent[0]].classes \
                    and self._derives_from(parent, word, depth + 1, keeping_init):
                return True
        return False

    def _definition(self, path: str, name: str, imports: Optional[dict[str, str]] = None,
                    depth: int = 0) -> Optional[tuple[str, str]]:
        """(module, key) of the function or class that ``name`` (dotted, as written
        in module ``path``) names, following imports and re-exports
        (``pkg/__init__.py``: ``from .engine import Trainer``)."""
        module = self.modules.get(path)
        if module is None or depth > 4:
            return None
        imports = module.imports if imports is None else imports
        head, _, rest = name.partition(".")
        if head not in imports:
            if name in module.functions or name in module.classes:
                return (path, name)
            return self._star_definition(path, name, depth)
        target = imports[head] + ("." + rest if rest else "")
        level = len(target) - len(target.lstrip("."))
        pieces = target[level:].split(".")
        # "pkg.mod.Cls.fit": the longest prefix that is a project module holds the rest.
        for split in range(len(pieces) - 1, -1 if level else 0, -1):
            module_name = "." * level + ".".join(pieces[:split])
            inner = ".".join(pieces[split:])
            resolved = self.resolve_module(path, module_name)
            if resolved is not None and resolved != path:
                found = self._definition(resolved, inner, None, depth + 1)
                if found is not None:
                    return found
        return None

    def _star_definition(self, path: str, name: str, depth: int) -> Optional[tuple[str, str]]:
        """``name`` brought in by a star import of a project module (``from
        ddpm_torch import *`` whose ``__init__`` re-exports ``Trainer``; ``from
        pkg.data import *`` then ``get_loader(...)``): the star-imported module
        that defines or imports it, the last one first (the last star import
        that defines a name wins, as in Python)."""
        module = self.modules[path]
        head = name.partition(".")[0]
        for base in reversed(module.star_imports):
            resolved = self.resolve_module(path, base)
            if resolved is None or resolved == path:
                continue
            target = self.modules[resolved]
            if head in target.imports or head in target.functions or head in target.classes \
                    or target.star_imports:
                found = self._definition(resolved, name, None, depth + 1)
                if found is not None:
                    return found
        return None

    def _method(self, owner: tuple[str, str], method: str, depth: int = 0) -> Optional[FunctionKey]:
        """Method ``method`` of class ``owner`` (module, class key), or of its
        project bases (first found, in base order)."""
        path, cls = owner
        module = self.modules[path]
        if f"{cls}.{method}" in module.functions:
            return (path, f"{cls}.{method}")
        for base in module.classes.get(cls, ()) if depth < 8 else ():
            found = self._definition(path, base)
            if found is not None and found[1] in self.modules[found[0]].classes:
                key = self._method(found, method, depth + 1)
                if key is not None:
                    return key
        return None

    def _unique_method(self, path: str, method: str) -> Optional[FunctionKey]:
        """The one method named ``method`` of the classes of module ``path`` (the
        judge's ``self.m`` and bare method names); None when none or several."""
        module = self.modules.get(path)
        if module is None:
            return None
        found = [key for key in module.functions
                 if key.endswith("." + method) and key[:-len(method) - 1] in module.classes]
        return (path, found[0]) if len(found) == 1 else None

    def function_key(self, path: str, function: str) -> FunctionKey:
        """The key of ``function`` in module ``path``: itself ("train",
        "Trainer.fit"), or for a bare method name the one method of that name."""
        module = self.modules.get(path)
        if module is None or function in module.functions:
            return (path, function)
        return self._unique_method(path, function) or (path, function)

    def _link_calls(self) -> None:
        self._wraps_through: set[str] = set()  # see _wraps_through_project
        for path, module in self.modules.items():
            resolved = []
            for call in module.calls:
                flags = [g for g in call.maybe_guards if g.startswith(FLAG_PREFIX)]
                if flags:  # ``if args.should_save:``: a guard when the attribute is a rank flag
                    call.maybe_guards = tuple(g for g in call.maybe_guards if not g.startswith(FLAG_PREFIX))
                    if any(self.is_rank_flag_attribute(g[len(FLAG_PREFIX):]) for g in flags):
                        call.guarded_lenient = True
                if call.maybe_guards and not call.guarded and any(
                        self.is_rank_predicate(path, module.imports, g) for g in call.maybe_guards):
                    call.guarded = call.guarded_lenient = True
                elif call.maybe_guards and not call.guarded_lenient and any(
                        self.override_is_rank_predicate(path, g, module.imports) for g in call.maybe_guards):
                    call.guarded_lenient = True  # ``if self._should_save():`` a DDP subclass overrides with a rank test
                keys = self.resolve_functions(path, call.callee)
                keys = [*keys, *(override for key in keys for override in self._self_call_overrides(key, call))]
                for key in keys:
                    self.callers.setdefault(key, []).append((path, call))
                if keys:
                    resolved.append(call)
                else:
                    if path not in self._wraps_through and self._wrap_through(path, module, call):
                        self._wraps_through.add(path)
                    weak = self._by_method_name(call)
                    if weak is not None:
                        self.weak_callers.setdefault(weak, []).append((path, call))
            # Calls into other libraries are dead weight from here on, and the
            # project is pickled to every worker process.
            module.calls = resolved

    def _self_call_overrides(self, key: FunctionKey, call: CallFact) -> list[FunctionKey]:
        """``self._sample_loop(model, x)`` in a method of ``Base``: on an instance of a
        project subclass the subclass's override runs (a template method: ``Base.sample``
        calls the loop each sampler implements), so those overrides are callees too."""
        caller_class = call.caller.rpartition(".")[0]
        owner, _, method = key[1].rpartition(".")
        if not call.instance or not caller_class or call.callee.rpartition(".")[0] != caller_class:
            return []
        return [(sub[0], f"{sub[1]}.{method}") for sub in self._descendants((key[0], owner))
                if f"{sub[1]}.{method}" in self.modules[sub[0]].functions]

    def _descendants(self, owner: tuple[str, str]) -> list[tuple[str, str]]:
        """Every project subclass of the class ``owner`` (path, class key), at any depth."""
        found, pending = [], list(self._subclasses().get(owner, ()))
        while pending:
            sub = pending.pop()
            if sub not in found:
                found.append(sub)
                pending.extend(self._subclasses().get(sub, ()))
        return found

    def _by_method_name(self, call: CallFact) -> Optional[FunctionKey]:
        """The one method of the project named like the unresolved instance call
        ``obj.m(...)`` whose parameters take the call's tagged arguments, when the call
        passes a wrapped model (or a parameter or instance attribute that may hold one) on."""
        holder, _, method = call.callee.rpartition(".")
        if not holder or holder.split(".")[0] in ("self", "cls") and "." not in holder \
                or holder.split(".")[-1][:1].isupper() or method.startswith("__"):
            return None  # ``self.m`` / ``Cls.m`` / dunders: the ordinary resolution's
        if not any(tag in (DDP_MODEL, FSDP_MODEL) or tag.startswith((PARAM_PREFIX, SELF_ATTRIBUTE_PREFIX))
                   for tag in call.args.values()):
            return None
        fitting = [key for key in self._methods_named(method) if self._takes_arguments(key, call)]
        return fitting[0] if len(fitting) == 1 else None

    def _methods_named(self, method: str) -> list[FunctionKey]:
        """Every method of a project class named ``method``."""
        if not hasattr(self, "_methods_by_name"):
            self._methods_by_name: dict[str, list[FunctionKey]] = {}
            for path, module in self.modules.items():
                for key in module.functions:
                    owner, _, name = key.rpartition(".")
                    if owner in module.classes:
                        self._methods_by_name.setdefault(name, []).append((path, key))
        return self._methods_by_name.get(method, [])

    def _takes_arguments(self, key: FunctionKey, call: CallFact) -> bool:
        function = self.function(key)
        params = _argument_params(function, call)
        return all(int(slot) < len(params) if slot.isdigit() else slot.split(".")[0] in function.params
                   or slot.split(".")[0].isdigit() for slot in call.args)

    def function(self, key: FunctionKey) -> Optional[FunctionFacts]:
        module = self.modules.get(key[0])
        return module.functions.get(key[1]) if module is not None else None

    def _link_imports(self) -> dict[str, set[str]]:
        imported: dict[str, set[str]] = {}
        for path, module in self.modules.items():
            found = imported.setdefault(path, set())
            for target in module.imports.values():
                # ``from utils import f`` names a function of ``utils``, or a module.
                for candidate in (target, target.rpartition(".")[0]):
                    resolved = self.resolve_module(path, candidate) if candidate.strip(".") else None
                    if resolved is not None and resolved != path:
                        found.add(resolved)
            for target in module.star_imports:
                resolved = self.resolve_module(path, target)
                if resolved is not None and resolved != path:
                    found.add(resolved)
            for pattern in module.dynamic_imports:
                found.update(m for m in self.modules_matching(pattern) if m != path)
        return imported

    def modules_matching(self, pattern: str) -> list[str]:
        """The project modules a run-time import may load: ``import_module``'s
        name with "*" for a formatted part ("pkg.trainers.*_trainer"), matched
        part by part against the end of each module's dotted path."""
        import fnmatch

        wanted = pattern.split(".")
        found = []
        for path in self.modules:
            parts = _module_parts(path)
            if len(parts) >= len(wanted) and all(
                    fnmatch.fnmatchcase(part, want) for part, want in zip(parts[-len(wanted):], wanted)):
                found.append(path)
        return found

    def _link_modules(self) -> dict[str, set[str]]:
        reaches = {path: set(targets) for path, targets in self.imported.items()}
        for (callee_path, _), calls in self.callers.items():
            for caller_path, _ in calls:
                if caller_path != callee_path:
                    reaches[caller_path].add(callee_path)
        return reaches

    # ------------------------------------------------------------------ propagation
    def _param_for_slot(self, key: FunctionKey, call: CallFact, slot: str) -> Optional[str]:
        function = self.function(key)
        if function is None:
            return None
        if not slot.isdigit():
            return slot if slot in function.params else None
        params = _argument_params(function, call)
        position = int(slot)
        return params[position] if position < len(params) else None

    def _propagate_wrapped_params(self) -> None:
        links = [(key, calls) for links in (self.callers, self.weak_callers) for key, calls in links.items()]
        changed = True
        while changed:
            changed = False
            for key, calls in links:
                for caller_path, call in calls:
                    for slot, tag in call.args.items():
                        if tag.startswith(PARAM_PREFIX):
                            tag = self.ddp_params.get((caller_path, call.caller), {}).get(tag[6:], "")
                        elif tag.startswith(RETURN_PREFIX):
                            tag = self.returned_tag(caller_path, tag)
                        elif tag.startswith(SELF_ATTRIBUTE_PREFIX):  # ``self.student`` stored from a parameter
                            owner, _, attribute = tag[len(SELF_ATTRIBUTE_PREFIX):].rpartition(".")
                            tag = self.attribute_wrapped(caller_path, owner, attribute)
                        if tag not in (DDP_MODEL, FSDP_MODEL):
                            continue
                        param = self._param_for_slot(key, call, slot)
                        if param is not None and param not in self.ddp_params.setdefault(key, {}):
                            self.ddp_params[key][param] = tag
                            changed = True

    def returned_tag(self, path: str, tag: str, depth: int = 0) -> str:
        """"ddp"/"fsdp" when the RETURN_PREFIX ``tag`` (written in module ``path``)
        names a project function whose returns hand back a wrapped model there,
        itself or through another project function's return (``model =
        set_model(m); return tokenizer, model``; three levels at most)."""
        for one in tag.split("|"):
            callee, _, item = one[len(RETURN_PREFIX):].rpartition(":")
            key = self.resolve_function(path, callee)
            function = self.function(key) if key is not None else None
            if function is None:
                continue
            if function.returns_wrapped.get(item):
                return function.returns_wrapped[item]
            through = function.returns_through.get(item)
            if through and depth < 3:
                kind = self.returned_tag(key[0], through, depth + 1)
                if kind:
                    return kind
        return ""

    def _propagate_collectives(self) -> None:
        """Which functions reach a collective, and under which flags: a set of the
        function's parameters (``if reduce:``) or of attributes its class stores from a
        constructor parameter ("self.dist"), one of which must be true; empty when it
        reaches one whatever its callers pass. A call that passes ``reduce=False`` (or
        leaves out a parameter defaulting to False or None) switches it off (a89
        dhanyajayagopal's ``logger.log_step(..., reduce=False)``; ``LSMSDataset(config)``
        whose base class all-reduces only ``if self.dist:``, HydraGNN)."""
        # Sparse (only the functions that do): a project has tens of thousands of functions.
        reaches: dict[FunctionKey, frozenset[str]] = {}
        for path, module in self.modules.items():
            for name, function in module.functions.items():
                if function.collective:
                    reaches[(path, name)] = frozenset()
                elif function.collective_flags:
                    reaches[(path, name)] = frozenset(function.collective_flags)
        changed = True
        while changed:
            changed = False
            for key, calls in self.callers.items():
                needs = reaches.get(key)
                if needs is None:
                    continue
                for caller_path, call in calls:
                    caller = (caller_path, call.caller)
                    if not call.caller or self.function(caller) is None:
                        continue
                    new = self.needs_at_call(key, needs, call, caller)
                    if new is None:
                        continue  # the call switches the collective off
                    known = reaches.get(caller)
                    merged = new if known is None else frozenset() if not known or not new else known | new
                    if merged != known:
                        reaches[caller] = merged
                        changed = True
        self._reaches_collective = reaches

    def needs_at_call(self, key: FunctionKey, needs: frozenset[str], call: CallFact,
                      caller: Optional[FunctionKey] = None) -> Optional[frozenset[str]]:
        """What the caller needs for this call to reach the callee's collective (which needs
        one of ``needs``): None when the call switches every flag off (False, None, or a
        left-out parameter defaulting to them); else the call's own flags, plus the caller's
        parameters it hands on to them and the instance's attributes a method of the same
        class keeps (empty when some flag gets another value: it reaches as the call runs)."""
        if not needs:
            return frozenset(call.needs_flags)
        function = self.function(key)
        if function is None or call.positional is None:
            return frozenset(call.needs_flags)
        same_instance = caller is not None and call.instance and caller[0] == key[0] \
            and "." in caller[1] and caller[1].rpartition(".")[0] == key[1].rpartition(".")[0]
        slots = {self._param_for_slot(key, call, slot): slot for slot in (*call.args, *call.false_slots)}
        filled = set(_argument_params(function, call)[:call.positional]) | set(call.keywords)
        kept: set[str] = set()
        for flag in needs:
            if flag.startswith("self.") and same_instance:
                kept.add(flag)
                continue
            param = self._constructor_param(key, flag) if flag.startswith("self.") else flag
            if param is None:
                return frozenset(call.needs_flags)  # an attribute of an instance built elsewhere
            slot = slots.get(param)
            if slot is not None and slot in call.false_slots:
                continue
            if slot is None and param not in filled and param in function.false_defaults:
                continue
            tag = call.args.get(slot, "") if slot is not None else ""
            if not tag.startswith(PARAM_PREFIX):
                return frozenset(call.needs_flags)  # given True or a value only the run knows
            kept.add(tag[len(PARAM_PREFIX):])
        return frozenset(call.needs_flags) | kept if kept else None

    def inherited_init_param(self, path: str, cls: str, attribute: str, depth: int = 0,
                             itself: bool = False) -> Optional[tuple[FunctionKey, str]]:
        """(the base's ``__init__``, its parameter) that ``self.<attribute>`` of class
        ``cls`` (module ``path``) was stored from in a project base class (``self.rank =
        rank`` in ``BaseTrainer.__init__``), the nearest base first; with ``itself``
        the class's own ``__init__`` first; None when none stores it so."""
        module = self.modules.get(path)
        if module is None or depth > 4:
            return None
        stored = module.attribute_params.get(cls, {}).get(attribute) if itself else None
        if stored is not None and stored[0] == "__init__":
            return (path, f"{cls}.__init__"), stored[1]
        for base in module.classes.get(cls, ()):
            found = self._definition(path, base)
            if found is None or found[1] not in self.modules[found[0]].classes:
                continue
            stored = self.modules[found[0]].attribute_params.get(found[1], {}).get(attribute)
            if stored is not None and stored[0] == "__init__":
                return (found[0], f"{found[1]}.__init__"), stored[1]
            deeper = self.inherited_init_param(found[0], found[1], attribute, depth + 1, itself)
            if deeper is not None:
                return deeper
        return None

    def _constructor_param(self, key: FunctionKey, flag: str) -> Optional[str]:
        """The ``__init__`` parameter an attribute flag ("self.dist") was stored from,
        when ``key`` is that constructor."""
        owner, _, method = key[1].rpartition(".")
        if method != "__init__" or not owner:
            return None
        stored = self.modules[key[0]].attribute_params.get(owner, {}).get(flag[len("self."):])
        return stored[1] if stored is not None and stored[0] == "__init__" else None

    def _propagate_param_use(self, attribute: str) -> dict[FunctionKey, set[str]]:
        """Params that a function forwards / loads into, directly or by passing
        them to a project function that does."""
        uses = {(p, n): set(getattr(f, attribute)) for p, m in self.modules.items()
                for n, f in m.functions.items() if getattr(f, attribute)}  # sparse
        changed = True
        while changed:
            changed = False
            for key, calls in self.callers.items():
                if key not in uses:
                    continue
                for caller_path, call in calls:
                    caller = (caller_path, call.caller)
                    if self.function(caller) is None:
                        continue
                    for slot, tag in call.args.items():
                        if not tag.startswith("param:") or tag[6:] in uses.get(caller, ()):
                            continue
                        if self._param_for_slot(key, call, slot) in uses.get(key, ()):
                            uses.setdefault(caller, set()).add(tag[6:])
                            changed = True
        return uses

    def _resolve_flagged_saves(self) -> None:
        """Saves under ``if obj.flag:`` (``FunctionFacts.saves_flagged``) are
        unguarded unless one of the flags is a rank flag of the project."""
        for module in self.modules.values():
            for function in module.functions.values():
                for flags, params, state in function.saves_flagged:
                    if not any(self.is_rank_flag_attribute(flag) or self.is_nulled_off_main(flag) for flag in flags):
                        function.saves_unguarded |= params
                        function.saves_state |= state

    def _propagate_saves(self, attribute: str, through_guards: bool) -> dict[FunctionKey, set[str]]:
        """Params a function hands to ``torch.save`` (see ``FunctionFacts.saves``),
        directly or by passing them to a project function that saves them; the
        unguarded variant only through calls under no rank guard."""
        saves = {(p, n): set(getattr(f, attribute)) for p, m in self.modules.items()
                 for n, f in m.functions.items() if getattr(f, attribute)}  # sparse
        if not through_guards:
            self._saves_state = {(p, n) for p, m in self.modules.items() for n, f in m.functions.items()
                                 if f.saves_state}
        changed = True
        while changed:
            changed = False
            for key, calls in self.callers.items():
                if not saves.get(key):
                    continue
                for caller_path, call in calls:
                    caller = (caller_path, call.caller)
                    if self.function(caller) is None or (
                            not through_guards and (call.guarded_lenient or call.maybe_guards or call.single_process)):
                        continue
                    for slot, tag in call.args.items():
                        if not tag.startswith(PARAM_PREFIX) or tag[6:] in saves.get(caller, ()):
                            continue
                        if self._slot_saved(key, call, slot, saves):
                            saves.setdefault(caller, set()).add(tag[6:])
                            if not through_guards and key in self._saves_state:
                                self._saves_state.add(caller)
                            changed = True
        return saves

    def saves_state(self, key: FunctionKey) -> bool:
        """Does the save helper ``key`` (or one it hands its parameters to) build
        the model state it writes on every rank itself?"""
        return key in self._saves_state

    def _slot_saved(self, key: FunctionKey, call: CallFact, slot: str, saves) -> bool:
        saved = saves.get(key, ())
        return self._param_for_slot(key, call, slot) in saved or ("*" in saved and slot.isdigit())

    def saving_function(self, path: str, callee: str, imports: Optional[dict[str, str]] = None,
                        unguarded: bool = False) -> Optional[FunctionKey]:
        """The project function ``callee`` names when it saves one of its
        parameters with ``torch.save`` (with no rank guard on the way when
        ``unguarded``): a save helper."""
        key = self.resolve_function(path, callee, imports)
        saves = self._saves_unguarded if unguarded else self._saves
        return key if key is not None and saves.get(key) else None

    def call_saves(self, key: FunctionKey, callee: str, slot: str, unguarded: bool = False) -> bool:
        """Does a call of the save helper ``key`` save what it passes in ``slot``?"""
        saves = self._saves_unguarded if unguarded else self._saves
        return self._slot_saved(key, _judge_call(callee), slot, saves)

    def saved_params(self, path: str, function: str, unguarded: bool = False) -> set[str]:
        saves = self._saves_unguarded if unguarded else self._saves
        return saves.get(self.function_key(path, function), set())

    # ------------------------------------------------------------------ values across calls
    def param_values(self, path: str, function: str, param: str) -> Optional[frozenset[str]]:
        """What the project's call sites pass for parameter ``param`` of
        ``function`` (module ``path``): the tags of ``ddplint.screen.facts``
        (GLOBAL_RANK, LOCAL_RANK, ARGV_LOCAL_RANK, CUDA_DEVICE, SPAWN_INDEX, LITERAL,
        "ddp", "fsdp") over every known call site, followed through parameters
        passed on, with UNKNOWN for a call that passes anything else (or nothing).
        None when no call is known. Callers that disagree are the caller's
        question (``{GLOBAL_RANK, UNKNOWN}`` is not a global rank)."""
        key = self.function_key(path, function)
        if not self.callers.get(key) or self.function(key) is None:
            return None
        if (key, param) not in self._param_values:
            self._solve_param_values((key, param))
        return self._param_values[(key, param)]

    def leaves_unfilled(self, path: str, function: str, param: str) -> bool:
        """Does every known call of ``function`` (module ``path``) leave ``param``
        to its default (no keyword, too few positional arguments, no ``*args`` /
        ``**kwargs``), with at least one call known? (``train(loader, model, ...)``
        never passing ``eval_criterion=``: the default function runs.)"""
        key = self.function_key(path, function)
        function_facts = self.function(key)
        calls = self.callers.get(key)
        if function_facts is None or not calls:
            return False
        for _, call in calls:
            if call.positional is None or param in call.keywords or not _a_real_call(call):
                return False
            params = _argument_params(function_facts, call)
            if param not in params or params.index(param) < call.positional:
                return False
        return True

    def some_call_switches_off(self, path: str, function: str, param: str) -> bool:
        """Does a known call of ``function`` (module ``path``) pass ``False`` or ``None``
        for ``param`` (``make_sampler(val, shuffle=False)``)?"""
        key = self.function_key(path, function)
        function_facts = self.function(key)
        if function_facts is None:
            return False
        for _, call in self.callers.get(key) or ():
            if any(self._param_for_slot(key, call, slot) == param for slot in call.false_slots):
                return True
        return False

    def _solve_param_values(self, start: tuple[FunctionKey, str]) -> None:
        """Collect the parameters whose values flow into ``start`` (through
        "param:NAME" arguments), then grow their tag sets to a fixpoint (calls
        may be recursive)."""
        direct: dict[tuple[FunctionKey, str], set[str]] = {}
        sources: dict[tuple[FunctionKey, str], list[tuple[FunctionKey, str]]] = {}
        stack = [start]
        while stack:
            node = stack.pop()
            if node in direct or node in self._param_values:
                continue
            direct[node], sources[node] = self._call_site_tags(*node)
            stack.extend(sources[node])
        values = {node: set(tags) for node, tags in direct.items()}
        changed = True
        while changed:
            changed = False
            for node, feeding in sources.items():
                for source in feeding:
                    extra = (self._param_values.get(source) or values[source]) - values[node]
                    if extra:
                        values[node] |= extra
                        changed = True
        for node, tags in values.items():
            self._param_values[node] = frozenset(tags or {UNKNOWN})

    def _call_site_tags(self, key: FunctionKey, param: str) -> tuple[set[str], list[tuple[FunctionKey, str]]]:
        """The tags the calls of ``key`` pass for ``param`` directly, and the
        callers' parameters they pass on."""
        calls = self.callers.get(key)
        if not calls:
            return {UNKNOWN}, []  # a caller's parameter nobody is known to fill
        tags: set[str] = set()
        feeding: list[tuple[FunctionKey, str]] = []
        for caller_path, call in calls:
            tag = self._slot_tag(key, call, param, caller_path)
            if tag.startswith(PARAM_PREFIX) and call.caller:
                feeding.append(((caller_path, call.caller), tag[len(PARAM_PREFIX):]))
            elif tag.startswith(RETURN_PREFIX):
                tags.add(self.returned_tag(caller_path, tag) or UNKNOWN)
            elif tag.startswith(SET_BY_CALLEE_PREFIX):
                tags.add(self._set_by_callee_tag(caller_path, tag) or (
                    self._local_rank_attribute_tag(caller_path) if tag.startswith(_SET_LOCAL_RANK) else UNKNOWN))
            elif tag.startswith(SELF_ATTRIBUTE_PREFIX):
                tags.add(UNKNOWN)
            elif tag == LOCAL_RANK_ATTRIBUTE:
                tags.add(self._local_rank_attribute_tag(caller_path))
            else:
                tags.add(tag or UNKNOWN)
        return tags, feeding

    def _local_rank_attribute_tag(self, path: str) -> str:
        """``args.local_rank`` that no callee set: the ``--local_rank`` flag the launcher
        passes when the project parses one, else unknown."""
        return ARGV_LOCAL_RANK if self.in_scope(path, lambda m: m.adds_local_rank_flag) else UNKNOWN

    def _set_by_callee_tag(self, path: str, tag: str) -> str:
        """The rank a "set:ATTR:CALLEE@SLOT|..." tag names: what a project function the
        object was handed to sets in that attribute (``init_distributed_mode(args)`` with
        ``args.rank = int(os.environ["RANK"])``; FunctionFacts.sets_param_ranks); the
        last such call before the read decides ("" when none sets it; a104 CHORE)."""
        attribute, _, calls = tag[len(SET_BY_CALLEE_PREFIX):].partition(":")
        for handed in reversed(calls.split("|")):
            callee, _, slot = handed.rpartition("@")
            key = self.resolve_function(path, callee)
            function = self.function(key) if key is not None else None
            if function is None or not slot.isdigit():
                continue
            params = _argument_params(function, _judge_call(callee))
            if int(slot) < len(params):
                found = function.sets_param_ranks.get(f"{params[int(slot)]}.{attribute}")
                if found:
                    return found
        return ""

    def _slot_tag(self, key: FunctionKey, call: CallFact, param: str, caller_path: str = "") -> str:
        """The tag ``call`` passes for ``param`` ("" when it passes something
        untagged or nothing). ``param`` may name an attribute of a parameter
        ("config.rank"): what the argument object carries there at the call."""
        if param in call.args:
            return call.args[param]
        function = self.function(key)
        if "." in param:
            base, attribute = param.split(".", 1)
            params = _argument_params(function, call) if function is not None else ()
            if base not in params:
                return ""
            slot = str(params.index(base))
            carried = call.args.get(f"{slot}.{attribute}")
            if carried is None and "." not in attribute and f"{slot}.*" in call.args:
                # set by a project function the object was handed to before this call
                carried = self._set_by_callee_tag(caller_path, call.args[f"{slot}.*"].replace(":*:", f":{attribute}:", 1))
            if not carried and "." not in attribute and call.args.get(slot, "").startswith(PARAM_PREFIX):
                # ``Model(args)`` inside ``train(args)``: what ``train``'s callers' objects carry
                # (a111 DUSTGaussian's ``args.local_rank`` read in a constructor)
                carried = f"{call.args[slot]}.{attribute}"
            if not carried and attribute == "local_rank" and f"{slot}.*" in call.args:
                carried = LOCAL_RANK_ATTRIBUTE
            return carried or ""
        params = _argument_params(function, call) if function is not None else ()
        if function is not None and param in function.true_defaults and _a_real_call(call) \
                and not self.fills(key, param, call.positional, call.keywords, call.instance):
            return TRUE  # left out: its default, the constant True
        if param not in params:
            return ""
        return call.args.get(str(params.index(param)), "")

    def returns_agreed(self, path: str, callee: str, imports: Optional[dict[str, str]] = None) -> bool:
        """Does the project function ``callee`` (as written in module ``path``)
        return a value a collective made the same on every rank?"""
        key = self.resolve_function(path, callee, imports)
        function = self.function(key) if key is not None else None
        return function is not None and function.returns_agreed

    # ------------------------------------------------------------------ training-loop facts
    def callee_facts(self, path: str, callee: str,
                     imports: Optional[dict[str, str]] = None) -> Optional[FunctionFacts]:
        """The facts of the project function (or method, "Cls.method") that
        ``callee`` names in module ``path``; None when it is not in the project."""
        key = self.resolve_function(path, callee, imports)
        return self.function(key) if key is not None else None

    def instance_holds_wrap(self, path: str, class_written: str) -> str:
        """"ddp"/"fsdp" when an instance of the project class ``class_written`` (as
        module ``path`` writes it) holds a DDP/FSDP-wrapped model in an attribute:
        ``policy = Policy(FSDP(get_model()), ...)`` with ``self.lm_model = lm_model``
        (a88 DPO-and-GRPO). Its methods (``policy.loss(x)``) run that model."""
        owner = self._definition(path, class_written)
        if owner is None or owner[1] not in self.modules[owner[0]].classes:
            return ""
        attributes: list[str] = []
        pending, seen = [owner], set()
        while pending:  # the attributes the class and its project bases store
            current = pending.pop()
            if current in seen or current[0] not in self.modules:
                continue
            seen.add(current)
            module = self.modules[current[0]]
            for table in (module.wrapped_attributes, module.attribute_params, module.attribute_returns):
                attributes += [a for a in table.get(current[1], {}) if a not in attributes]
            for base in module.classes.get(current[1], ()):
                found = self._definition(current[0], base)
                if found is not None and found[1] in self.modules[found[0]].classes:
                    pending.append(found)
        for attribute in attributes:
            kind = self.attribute_wrapped(owner[0], owner[1], attribute)
            if kind:
                return kind
        return ""

    def attribute_wrapped(self, path: str, class_key: str, attribute: str) -> str:
        """"ddp"/"fsdp" when ``self.<attribute>`` is assigned a DDP/FSDP wrap in
        class ``class_key`` of module ``path``, in one of its project bases, or
        in a project subclass (a strategy base class whose subclass wraps
        ``self.model`` in its setup); "" otherwise."""
        seen: set[tuple[tuple[str, str], str]] = set()
        # The instance is of this class or a subclass, and the methods of those classes and of
        # all their bases act on it: down through the subclasses, up through anyone's bases, but
        # never up and then down: a sibling subclass's wrap (``class DDP(Base)`` beside ``class
        # LocalSGD(Base)``) is not this class's (a95 Pseudo-Asynchronous-LocalSGD); a mixin base
        # of a subclass is (``class DDPTrainer(DDPTask, Trainer)``).
        pending = [(path, class_key, "both")]
        while pending:
            *owner_parts, direction = pending.pop()
            owner = tuple(owner_parts)
            if (owner, direction) in seen or owner[0] not in self.modules:
                continue
            seen.add((owner, direction))
            module = self.modules[owner[0]]
            kind = module.wrapped_attributes.get(owner[1], {}).get(attribute, "")
            stored = module.attribute_params.get(owner[1], {}).get(attribute)
            if not kind and stored is not None:  # ``self.dis = dis`` with a wrapped ``dis`` passed in
                kind = self.ddp_params.get((owner[0], f"{owner[1]}.{stored[0]}"), {}).get(stored[1], "")
            returned = module.attribute_returns.get(owner[1], {}).get(attribute)
            if not kind and returned:  # ``self.model = prepare_dp_model(...)`` returning ``FSDP(...)``
                kind = self.returned_tag(owner[0], returned)
            if kind:
                return kind
            for base in module.classes.get(owner[1], ()):
                found = self._definition(owner[0], base)
                if found is not None and found[1] in self.modules[found[0]].classes:
                    pending.append((*found, "up"))
            if direction != "up":
                pending.extend((*sub, "down") for sub in self._subclasses().get(owner, ()))
        return ""

    def overriding_methods(self, path: str, cls: str, method: str) -> list[FunctionFacts]:
        """The ``method`` of every project class derived from class ``cls`` of module
        ``path`` (a few levels down) that defines its own: what ``self.method()`` in the
        base may run (``self._train_epoch(epoch)`` of an abstract ``BaseTrainer``)."""
        found: list[FunctionFacts] = []
        pending, seen = [(path, cls)], set()
        while pending and len(seen) < 32:
            owner = pending.pop()
            if owner in seen:
                continue
            seen.add(owner)
            for sub in self._subclasses().get(owner, ()):
                function = self.modules[sub[0]].functions.get(f"{sub[1]}.{method}")
                if function is not None:
                    found.append(function)
                pending.append(sub)
        return found

    def _subclasses(self) -> dict[tuple[str, str], list[tuple[str, str]]]:
        if not hasattr(self, "_subclass_cache"):
            found: dict[tuple[str, str], list[tuple[str, str]]] = {}
            for path, module in self.modules.items():
                for cls, bases in module.classes.items():
                    for base in bases:
                        owner = self._definition(path, base)
                        if owner is not None:
                            found.setdefault(owner, []).append((path, cls))
            self._subclass_cache = found
        return self._subclass_cache

    # ------------------------------------------------------------------ screens
    def screen_facts(self, path: str) -> frozenset[str]:
        """What the project says of module ``path`` for the rules' screens
        (``ddplint.screen.screening.resolve``): "rank_predicate", "saves",
        "loads" when it calls a project function that is one (a rank test, a
        save or load helper), "collective" when it calls one that reaches a
        collective or runs a forward of a wrapped model it is given,
        "receives_ddp" when a function of it is given a DDP model by some call
        site, "wrapped" when it may hold a model wrapped elsewhere (a function
        given a DDP/FSDP model, a call returning one, a class related to one
        that wraps an attribute), "loader" when it calls a loader builder whose
        DistributedSampler depends on a flag (FunctionFacts.sampler_switch)."""
        if not hasattr(self, "_screen_cache"):
            found: dict[str, set[str]] = {}
            for key, calls in self.callers.items():
                function = self.function(key)
                kinds = set()
                if function is not None and function.rank_predicate:
                    kinds.add("rank_predicate")
                if self._saves.get(key) or self._saves_unguarded.get(key):
                    kinds.add("saves")
                if self._loads.get(key):
                    kinds.add("loads")
                if self.reaches_collective(key) or self._forwards.get(key) or (
                        function is not None and function.forwards_globals):
                    kinds.add("collective")
                if function is not None and function.returns_wrapped:
                    kinds.add("wrapped")
                if function is not None and function.sampler_switch:
                    kinds.add("loader")  # a loader builder whose sampler is optional (DDP009)
                if kinds:
                    for caller_path, _ in calls:
                        found.setdefault(caller_path, set()).update(kinds)
            for (path_, _), params in self.ddp_params.items():
                if params:
                    found.setdefault(path_, set()).add("wrapped")
                if "ddp" in params.values():
                    found.setdefault(path_, set()).add("receives_ddp")
            for path_ in self._wrapping_hierarchies():
                found.setdefault(path_, set()).add("wrapped")
            self._screen_cache = {p: frozenset(k) for p, k in found.items()}
        kinds = self._screen_cache.get(path, frozenset())
        if self.module_in_ddp_context(path) or self._wraps_through_project(path):
            kinds |= {"context"}  # DDP context, project-wide (a DDP011-style screen asks)
        return kinds

    def _wraps_through_project(self, path: str) -> bool:
        """Does module ``path`` call ``ext_dist.DDP(net)`` where project module
        ``ext_dist`` imports DDP, FSDP or init_process_group under that name
        (``models.wraps_through_a_project_module`` from the facts)? Known from
        the calls the join drops (they reach no project function)."""
        return path in self._wraps_through

    def _wrap_through(self, path: str, module: ModuleFacts, call: CallFact) -> bool:
        holder, _, attribute = call.callee.rpartition(".")
        if not holder or "." in holder or call.instance:  # as there: a holder an import binds
            return False
        target = module.imports.get(holder)
        found = self.resolve_module(path, target) if target else None
        other = self.modules.get(found) if found else None
        return other is not None and names.canonical(other.imports.get(attribute, "")) in (
            names.DDP, names.FSDP, names.INIT_PROCESS_GROUP)

    def _wrapping_hierarchies(self) -> set[str]:
        """Modules with a class in the same inheritance family (bases and
        subclasses, as ``attribute_wrapped`` walks them) as a class that
        assigns a DDP/FSDP wrap to an attribute."""
        seen: set[tuple[str, str]] = set()
        pending = [(path, cls) for path, module in self.modules.items()
                   for cls in {*module.wrapped_attributes, *module.attribute_returns} if self._stores_wrapped_model(path, cls)]
        while pending:
            owner = pending.pop()
            if owner in seen or owner[0] not in self.modules:
                continue
            seen.add(owner)
            module = self.modules[owner[0]]
            for base in module.classes.get(owner[1], ()):
                found = self._definition(owner[0], base)
                if found is not None and found[1] in self.modules[found[0]].classes:
                    pending.append(found)
            pending.extend(self._subclasses().get(owner, ()))
        return {path for path, _ in seen}

    # ------------------------------------------------------------------ questions
    def reaches_collective(self, key: FunctionKey) -> bool:
        return key in self._reaches_collective

    def call_reaches(self, path: str, callee: str, imports: dict[str, str],
                     wrapped_slots: dict[str, str], call: Optional[CallFact] = None) -> Optional[str]:
        """What a call of ``callee`` from module ``path`` reaches: "collective",
        "forward" (a forward of a wrapped model passed in ``wrapped_slots``),
        "load" (a load_state_dict into it), or None. A method of what a factory
        returns answers when every class it may build answers alike."""
        keys = self.resolve_functions(path, callee, imports)
        if not keys and wrapped_slots:
            # ``self.diffusion.sample(model=self.model)``, the instance's class unknown: the one
            # method of the project so named that takes those arguments (as _by_method_name links)
            fitting = self._method_named_taking(callee, wrapped_slots)
            keys = [fitting] if fitting is not None else []
        found = {self._key_reaches(key, callee, wrapped_slots, call) for key in keys}
        return found.pop() if len(found) == 1 else None

    def _method_named_taking(self, callee: str, slots: dict[str, str]) -> Optional[FunctionKey]:
        """The one project method named like the unresolved instance call ``callee``
        (``holder.m`` with a dotted, lower-case holder) whose parameters take ``slots``."""
        holder, _, method = callee.rpartition(".")
        if not holder or "." not in holder and holder in ("self", "cls") \
                or holder.split(".")[-1][:1].isupper() or method.startswith("__"):
            return None
        call = CallFact(callee, "", False, False, args=dict(slots), instance=True)
        fitting = [key for key in self._methods_named(method) if self._takes_arguments(key, call)]
        return fitting[0] if len(fitting) == 1 else None

    def _key_reaches(self, key: FunctionKey, callee: str, wrapped_slots: dict[str, str],
                     call: Optional[CallFact] = None) -> Optional[str]:
        """(``call``: the call as the judge saw it, its slots given False or None, to tell
        whether it switches the collective off.)"""
        if self.reaches_collective(key) and not (
                call is not None and self.needs_at_call(key, self._reaches_collective[key], call) is None):
            return "collective"
        function, module = self.function(key), self.modules[key[0]]
        if function is not None and function.forwards_globals & module.wrapped_globals.keys():
            return "forward"  # ``def estimate_loss(): model(x)`` with a module-level DDP model
        call = _judge_call(callee)
        for slot in wrapped_slots:
            param = self._param_for_slot(key, call, slot)
            if param is not None and param in self._forwards.get(key, ()):
                return "forward"
        return None

    def attribute_forward(self, path: str, callee: str, imports: dict[str, str]) -> str:
        """"ddp"/"fsdp" when the project method ``callee`` ("Trainer.evaluate",
        as ``models.project_callee`` spells it) runs a forward of an instance
        attribute that its class stores a wrapped model in (``self.net(x)`` with
        ``self.net = net`` given ``DDP(...)``), itself or through methods it calls
        on ``self`` (at most 4 calls deep)."""
        key = self.resolve_function(path, callee, imports)
        if key is None or "." not in key[1]:
            return ""
        cache = self.__dict__.setdefault("_attribute_forward_cache", {})
        if key in cache:
            return cache[key]
        cache[key] = ""
        owner = key[1].rpartition(".")[0]
        kind = ""
        for attribute in sorted(self._attribute_forwards(key)):
            kind = self.attribute_wrapped(key[0], owner, attribute)
            if kind:
                break
        cache[key] = kind
        return kind

    def _attribute_forwards(self, key: FunctionKey) -> set[str]:
        """Attributes of ``self`` a method calls, itself or through ``self.m()``."""
        found: set[str] = set()
        seen, pending = {key}, [(key, 0)]
        while pending:
            current, depth = pending.pop()
            function = self.function(current)
            if function is None:
                continue
            found |= function.forwards_attributes
            if depth >= 4:
                continue
            module = self.modules[current[0]]
            owner = current[1].rpartition(".")[0]
            for call in self._calls_by_caller(current[0]).get(current[1], ()):
                if not call.instance or call.callee.rpartition(".")[0] != owner:
                    continue  # only the instance's own methods (``self.m()``)
                target = self.resolve_function(current[0], call.callee, module.imports)
                if target is not None and target not in seen:
                    seen.add(target)
                    pending.append((target, depth + 1))
        return found

    def _calls_by_caller(self, path: str) -> dict[str, list[CallFact]]:
        cache = self.__dict__.setdefault("_calls_by_caller_cache", {})
        if path not in cache:
            grouped: dict[str, list[CallFact]] = {}
            for call in self.modules[path].calls:
                grouped.setdefault(call.caller, []).append(call)
            cache[path] = grouped
        return cache[path]

    def hands_on_wrapped(self, path: str, callee: str, imports: dict[str, str],
                         wrapped_slots: dict[str, str]) -> bool:
        """Does the project function ``callee`` hand a wrapped model it is given
        (in ``wrapped_slots``) on to ``obj.run(...)`` / ``obj.evaluate(...)`` of
        an object whose class the project cannot tell (``FunctionFacts.hands_on``)?"""
        key = self.resolve_function(path, callee, imports)
        function = self.function(key) if key is not None else None
        if function is None or not function.hands_on:
            return False
        call = _judge_call(callee)
        return any(self._param_for_slot(key, call, slot) in function.hands_on for slot in wrapped_slots)

    def loading_function(self, path: str, callee: str, imports: dict[str, str]) -> Optional[FunctionKey]:
        """The project function ``callee`` names when it loads weights into one of
        its parameters (directly or through another project function)."""
        key = self.resolve_function(path, callee, imports)
        return key if key is not None and self._loads.get(key) else None

    def call_loads_into(self, key: FunctionKey, callee: str, slot: str) -> bool:
        param = self._param_for_slot(key, _judge_call(callee), slot)
        return param is not None and param in self._loads.get(key, ())

    def wrapped_param(self, path: str, function: str, param: str) -> str:
        """"ddp"/"fsdp" when some call site passes a wrapped model as ``param``."""
        return self.ddp_params.get(self.function_key(path, function), {}).get(param, "")

    def is_rank_predicate(self, path: str, imports: dict[str, str], callee: str) -> bool:
        key = self.resolve_function(path, callee, imports)
        function = self.function(key) if key else None
        return function is not None and function.rank_predicate

    def override_is_rank_predicate(self, path: str, callee: str, imports: dict[str, str]) -> bool:
        """Is ``callee`` (a method called on ``self``, "Trainer._should_save") overridden in
        a project subclass by a method whose returns are rank tests (``DDPTrainer.
        _should_save`` returning ``self.rank == 0``)? On such an instance the base
        class's ``if self._should_save(epoch):`` lets only that rank through."""
        key = self.resolve_function(path, callee, imports)
        if key is None or "." not in key[1]:
            return False
        owner, _, method = key[1].rpartition(".")
        for sub in self._descendants((key[0], owner)):
            # the subclass's own method, or a sibling base's that comes first in its MRO
            # (``class DDPTrainer(DDPBaseTask, Trainer)`` with ``DDPBaseTask.should_save``)
            candidates = [sub] + [found for base in self.modules[sub[0]].classes.get(sub[1], ())
                                  if (found := self._definition(sub[0], base)) is not None
                                  and found != (key[0], owner) and found[0] in self.modules]
            for holder in candidates:
                function = self.modules[holder[0]].functions.get(f"{holder[1]}.{method}")
                if function is not None and function.rank_predicate_lenient:  # (``self._rank == 0``: a spawn index)
                    return True
        return False

    def destroys_process_group(self, path: str) -> bool:
        """Does module ``path`` destroy the process group where something may run
        it: at module level, or in a function that ``may_run``? A ``cleanup()``
        nobody calls destroys nothing."""
        module = self.modules.get(path)
        if module is None:
            return False
        return module.destroys_process_group or any(self.may_run(path, f) for f in module.destroy_functions)

    def starts_process_group(self, path: str) -> bool:
        """Does module ``path`` call a project function that runs
        ``init_process_group`` itself (an entry script's ``setup_launch(cfg)``)?"""
        starters = getattr(self, "_group_starters", None)
        if starters is None:
            starters = self._group_starters = {
                caller for key, calls in self.callers.items()
                if self.function(key) is not None and self.function(key).inits_process_group
                for caller, _ in calls}
        return path in starters

    def reaches_group_start(self, key: FunctionKey) -> bool:
        """Does the project function ``key`` run ``init_process_group``, itself or
        through the project functions it calls (followed up the call graph from
        every set-up helper)?"""
        reaching = getattr(self, "_group_start_reachers", None)
        if reaching is None:
            reaching = {(m.path, name) for m in self.modules.values() for name, f in m.functions.items()
                        if f.inits_process_group}
            frontier = list(reaching)
            while frontier:
                for caller_path, call in self.callers.get(frontier.pop(), ()):
                    caller = (caller_path, call.caller)
                    if call.caller and caller not in reaching:
                        reaching.add(caller)
                        frontier.append(caller)
            self._group_start_reachers = reaching
        return key in reaching

    def may_run(self, path: str, function: str) -> bool:
        """May something run the function ("cleanup", "Trainer.close") of module
        ``path``: the project calls it, names it as a call or hands it to one
        anywhere (``atexit.register(cleanup)``, ``self.close()``), or it is a
        dunder or a method of a class with bases (a framework's hook)?"""
        module = self.modules.get(path)
        if module is None:
            return True
        if self.callers.get((path, function)) or self.weak_callers.get((path, function)):
            return True
        owner, _, name = function.rpartition(".")
        if name.startswith("__") or owner and module.classes.get(owner):
            return True
        called = getattr(self, "_call_names", None)
        if called is None:
            called = self._call_names = frozenset().union(*(m.call_names for m in self.modules.values()))
        return name in called

    def is_rank_flag_attribute(self, attribute: str) -> bool:
        """Is ``obj.<attribute>`` a rank flag: every assignment of an attribute of
        that name in the project (at least one) stores a rank test or a boolean
        under a rank guard (``ModuleFacts.attribute_flags``)? ``if opt.log:`` after
        a set-up helper ran ``opt.log = opt.rank % ngpus == 0`` tests the rank."""
        flags = getattr(self, "_attribute_flags", None)
        if flags is None:
            flags = self._attribute_flags = {}
            for module in self.modules.values():
                for name, flag in module.attribute_flags.items():
                    flags[name] = flags.get(name, True) and flag
        return flags.get(attribute, False)

    def is_nulled_off_main(self, attribute: str) -> bool:
        """Does some module of the project set ``obj.<attribute>`` to an empty
        value (None, False) only in an arm of a rank test that rank 0 never takes
        (``if rank not in [0, -1]: cfg.ckpt_dir = None``, ``if gpu != 0:
        self.verbose = False``)? ``if cfg.ckpt_dir is not None:`` then lets only
        rank 0 through (``ModuleFacts.nulled_off_main``)."""
        nulled = getattr(self, "_nulled_off_main", None)
        if nulled is None:
            nulled = self._nulled_off_main = frozenset().union(*(m.nulled_off_main for m in self.modules.values()))
        return attribute in nulled

    def is_switched_off_main(self, attribute: str) -> bool:
        """Does some module of the project set ``obj.<attribute> = False`` only in
        an arm of a rank test that rank 0 never takes (``ModuleFacts.switched_off_main``)?"""
        switched = getattr(self, "_switched_off_main", None)
        if switched is None:
            switched = self._switched_off_main = frozenset().union(
                *(m.switched_off_main for m in self.modules.values()))
        return attribute in switched

    def fills(self, key: FunctionKey, param: str, positional: Optional[int], keywords: Iterable[str],
              instance: bool) -> bool:
        """May a call of the function ``key`` with ``positional`` arguments
        (None: ``*args`` / ``**kwargs``) and ``keywords`` pass ``param``?"""
        function = self.function(key)
        if function is None or positional is None or param in keywords:
            return True
        params = function.params
        if instance and params[:1] and params[0] in ("self", "cls"):
            params = params[1:]
        return param in params[:positional]

    def saves_when_called(self, key: FunctionKey, positional: Optional[int], keywords: Iterable[str],
                          instance: bool) -> bool:
        """Does the call pass what the function's saves need (``saves_need``:
        ``lm_checkpoint(cfg, model=None)`` saves only when given a model)? True
        when they need nothing."""
        function = self.function(key)
        needs = function.saves_need if function is not None else ()
        return not needs or any(self.fills(key, param, positional, keywords, instance) for param in needs)

    def saving_callers_unguarded(self, key: FunctionKey) -> bool:
        """Does some call that makes the function save (see ``saves_when_called``)
        run unguarded, itself and in its caller's callers?"""
        for caller_path, call in self.callers.get(key) or ():
            if call.guarded_lenient or not self.saves_when_called(key, call.positional, call.keywords, call.instance):
                continue
            if call.caller and self.callers_guarded(caller_path, call.caller) is True:
                continue
            return True
        return False

    def callers_guarded(self, path: str, function: str, _seen: Optional[set] = None) -> Optional[bool]:
        """True when every known call of the function runs under a rank guard
        (itself, or in a caller that is only ever called guarded); False when
        some call is unguarded; None when no call is known."""
        key = self.function_key(path, function)
        seen = _seen if _seen is not None else set()
        if key in seen:
            return None
        seen.add(key)
        calls = self.callers.get(key)
        if not calls:
            return None
        unknown = False
        for caller_path, call in calls:
            if call.guarded_lenient:
                continue
            caller = self.function((caller_path, call.caller)) if call.caller else None
            if caller is not None and caller.rank_zero_only:
                continue
            if call.caller and call.caller != key[1]:
                above = self.callers_guarded(caller_path, call.caller, seen)
                if above is True:
                    continue
                if above is None and caller is not None:
                    unknown = True  # the caller's own callers are unknown; another call may still decide
                    continue
            return False
        return None if unknown else True

    def callers_no_grad(self, path: str, function: str, _seen: Optional[set] = None) -> Optional[bool]:
        """True when every known call of the function runs with autograd off
        (inside ``with torch.no_grad():``, or in a function every call of which
        does, a few levels up); False when some call may run with it on; None
        when no call is known. Bounded by the functions already seen."""
        key = self.function_key(path, function)
        seen = _seen if _seen is not None else set()
        if key in seen or len(seen) > 8:
            return None
        seen.add(key)
        calls = self.callers.get(key)
        if not calls:
            return None
        for caller_path, call in calls:
            if getattr(call, "no_grad", False):
                continue
            if call.caller and call.caller != key[1] and \
                    self.callers_no_grad(caller_path, call.caller, seen) is True:
                continue
            return False
        return True

    def caller_modules(self, path: str, function: str) -> Optional[list[ModuleFacts]]:
        """The modules that call the function; None when no call is known."""
        calls = self.callers.get(self.function_key(path, function))
        return [self.modules[caller] for caller, _ in calls] if calls else None

    def outer_caller_modules(self, path: str, function: str, depth: int = 0) -> Optional[list[ModuleFacts]]:
        """As ``caller_modules``, but a call from another function of the same module
        (``self._reset()`` in ``Solver.__init__``) stands for the callers of that
        function, two levels at most: the modules whose code runs it."""
        calls = self.callers.get(self.function_key(path, function))
        if not calls:
            return None
        found: list[ModuleFacts] = []
        for caller, call in calls:
            outer = self.outer_caller_modules(caller, call.caller, depth + 1) \
                if caller == path and call.caller and depth < 2 else None
            found += outer if outer else [self.modules[caller]]
        return found

    def defines_own_method(self, method: str) -> bool:
        """Does a project class that subclasses neither DDP nor FSDP define
        ``method`` (a home-grown data-parallel wrapper with its own ``no_sync``)?"""
        for module in self.modules.values():
            for key in module.functions:
                owner, _, name = key.rpartition(".")
                if name == method and owner in module.classes and not any(
                        "DistributedDataParallel" in base or "FullyShardedDataParallel" in base
                        or base.rpartition(".")[2] in ("DDP", "FSDP") for base in module.classes[owner]):
                    return True
        return False

    def runs_single_process_only(self, key: FunctionKey, depth: int = 0) -> bool:
        """Is every known call of the function (at least one) in a single-process arm
        (``else: single_main()``), or in a function that only such calls run? ``runner.train()``
        in ``single_main`` runs ``SingleRunner.train`` only without distributed training
        (a118 OpenP5; ``DistributedRunner`` overrides it)."""
        calls = self.callers.get(key)
        if not calls or depth > 3:
            return False
        for path, call in calls:
            if call.single_process:
                continue
            if not call.caller or not self.runs_single_process_only((path, call.caller), depth + 1):
                return False
        return True

    def averages_gradients_by_hand(self) -> bool:
        """Does the project all-reduce gradients itself (``dist.all_reduce(p.grad)``) and wrap
        no model in DDP/FSDP anywhere, nor use a framework that wraps for it (accelerate,
        Lightning, DeepSpeed, ...)? Then its loops are no DDP training loops (a118 allenact)."""
        if not hasattr(self, "_by_hand"):
            modules = self.modules.values()
            self._by_hand = any(m.reduces_gradients for m in modules) and not (
                any(m.wraps_models or m.uses_sharding_framework or m.wrapped_globals or m.wrapped_attributes
                    for m in modules) or any(params for params in self.ddp_params.values()))
        return self._by_hand

    def any_module(self, attribute: str) -> bool:
        """Whole-project question (every file under the root); rules ask
        ``in_scope`` instead, which follows what the entry script reaches."""
        return any(getattr(m, attribute) for m in self.modules.values())

    # ------------------------------------------------------------------ reachability scope
    def scope(self, path: str) -> frozenset[str]:
        """"Anywhere in the project" as seen from module ``path``: every module
        reached (imports, calls, spawn targets) from any module that reaches
        ``path``, itself included. Independent scripts of one folder (an examples
        repository) do not see each other; a helper module used by two scripts
        sees both. An unknown module sees the whole project (precision first)."""
        if path not in self.modules:
            return frozenset(self.modules)
        if path not in self._scopes:
            entries = _closure([path], self._reached_by)
            self._scopes[path] = frozenset(_closure(entries, self.reaches))
        return self._scopes[path]

    def run_scope(self, path: str) -> frozenset[str]:
        """The modules a run of the script ``path`` reaches (imports, calls, spawn
        targets), without the modules that import it."""
        if path not in self.modules:
            return frozenset(self.modules)
        return frozenset(_closure([path], self.reaches))

    def in_scope(self, path: str, predicate: Callable[[ModuleFacts], bool]) -> bool:
        """Does some module in ``scope(path)`` satisfy ``predicate``?"""
        return any(predicate(self.modules[other]) for other in self.scope(path))

    def sets_device_in_scope(self, path: str) -> bool:
        """Does a ``torch.cuda.set_device`` call that may run sit anywhere in the
        project as seen from ``path``? One inside a helper that no module calls nor
        imports by name (``init_distributed_mode`` of a utils module the script
        imports for ``seed_everything``) never runs."""
        for other in self.scope(path):
            module = self.modules[other]
            if module.calls_set_device and (other == path or not module.set_device_only_in or any(
                    self.may_be_called(other, name) for name in module.set_device_only_in)):
                return True
        return False

    def masked_by_launcher(self, path: str) -> bool:
        """Does a shell launcher of the project run the script ``path`` with one GPU
        visible per process (``export CUDA_VISIBLE_DEVICES=$1`` then ``python
        .../models/train.py``, the path written as on the machine it ran on)?"""
        launched = getattr(self, "_masked_launches", None)
        if launched is None:
            launched = self._masked_launches = [
                (module.path, script) for module in self.modules.values() for script in module.launches_masked]
            # ``mpiexec ... ./set_affinity_gpu.sh python3 main.py`` where the wrapper masks the
            # GPUs and runs its arguments (a102 PyGeom_DDP)
            launched += [(module.path, script) for module in self.modules.values()
                         for wrapper, script in module.launches_through
                         if self._masking_wrapper(module.path, wrapper)]
        for launcher, script in launched:
            script = script[2:] if script.startswith("./") else script
            beside = posixpath.normpath(posixpath.join(posixpath.dirname(launcher), script))
            if path in (script, beside) or script.endswith("/" + path):
                return True
            # An absolute path of the machine it ran on (``/scratch1/me/blox/models/train.py``):
            # the script's folder and name identify it.
            tail = script.split("/")[-2:]
            if len(tail) == 2 and tail[0] not in ("", ".", "..") and path.split("/")[-2:] == tail:
                return True
        return False

    def _masking_wrapper(self, launcher: str, wrapper: str) -> bool:
        wrapper = wrapper[2:] if wrapper.startswith("./") else wrapper
        beside = posixpath.normpath(posixpath.join(posixpath.dirname(launcher), wrapper))
        module = self.modules.get(beside) or self.modules.get(wrapper)
        return module is not None and module.masks_its_command

    def only_masked_processes_reach(self, path: str) -> bool:
        """Does every process that runs module ``path`` see one GPU? The module is
        imported only by scripts that set ``CUDA_VISIBLE_DEVICES`` per process (and
        by modules imported only by such scripts): its ``cuda:0`` is the rank's GPU."""
        reachers = _closure([path], self._reached_by) - {path}
        entries = [other for other in reachers if not (self._reached_by.get(other, set()) - {other})]
        return bool(entries) and all(self.modules[other].masks_visible_devices or self.masked_by_launcher(other)
                                     for other in entries)

    def may_be_called(self, path: str, function: str) -> bool:
        """Some module calls (or spawns) ``function`` of module ``path``, or imports
        it by name (and may hand it on)."""
        key = (path, function)
        if self.callers.get(key) or self.weak_callers.get(key):
            return True
        return any(other != path and any(target == function or target.endswith("." + function)
                                         for target in module.imports.values())
                   for other, module in self.modules.items())

    def reached_by(self, path: str) -> frozenset[str]:
        """The other modules that import or call into module ``path`` directly."""
        return frozenset(self._reached_by.get(path, set()) - {path})

    @property
    def _reached_by(self) -> dict[str, set[str]]:
        if not hasattr(self, "_reverse_cache"):
            reverse: dict[str, set[str]] = {}
            for source, targets in self.reaches.items():
                for target in targets:
                    reverse.setdefault(target, set()).add(source)
            self._reverse_cache = reverse
        return self._reverse_cache

    def module_in_ddp_context(self, path: str) -> bool:
        """RULES.md's DDP context, project-wide: the module itself, a module a DDP
        module imports or calls into, or one whose functions receive DDP models."""
        if path not in self._context:
            self._context[path] = self._compute_context(path)
        return self._context[path]

    def ddp_importers_only(self, path: str) -> Optional[list[ModuleFacts]]:
        """The DDP modules that import module ``path`` when that is its only
        reason to be in DDP context (no DDP code of its own, no DDP model passed
        to or returned into it); None otherwise."""
        module = self.modules.get(path)
        if module is None or module.own_ddp_context or path in self._receives_wrapped \
                or path in self._gets_wrapped_back:
            return None
        found = [other for other_path, other in self.modules.items()
                 if other.own_ddp_context and path in self.imported[other_path]]
        return found or None

    def _compute_context(self, path: str) -> bool:
        module = self.modules.get(path)
        if module is None:
            return False
        if module.own_ddp_context:
            return True
        if path in self._receives_wrapped or path in self._gets_wrapped_back:
            return True
        return path in self._imported_by_ddp_modules or self._subclasses_ddp_class(path, module) \
            or self._subclassed_by_ddp_code(path, module)

    def _subclassed_by_ddp_code(self, path: str, module: ModuleFacts) -> bool:
        """Does a DDP class of another module (``_ddp_class``) subclass a class of this
        one (``class DDPTrainer(DDPBaseTask, Trainer)`` over a plain ``Trainer``)? The
        inherited methods run in its workers."""
        subclasses = self._subclasses()
        for cls in module.classes:
            for sub_path, sub_class in subclasses.get((path, cls), ()):
                if sub_path != path and self._ddp_class(sub_path, sub_class):
                    return True
        return False

    def _ddp_class(self, path: str, cls: str, depth: int = 0) -> bool:
        """Is the class in a module with DDP code of its own, or has it a project base
        class that is (``class DDPTrainer(DDPBaseTask, Trainer)``)?"""
        module = self.modules.get(path)
        if module is None or depth > 4:
            return False
        if module.own_ddp_context:
            return True
        for base in module.classes.get(cls, ()):
            found = self._definition(path, base)
            if found is not None and found != (path, cls) and self._ddp_class(found[0], found[1], depth + 1):
                return True
        return False

    def _subclasses_ddp_class(self, path: str, module: ModuleFacts) -> bool:
        """Does a class of the module subclass a project class that stores a DDP/FSDP
        model (``class DM(Base)`` with ``Base.__init__`` wrapping ``self.model``)? Its
        methods run on that object: DDP code, whatever the module imports."""
        for bases in module.classes.values():
            for base in bases:
                found = self._definition(path, base)
                if found is not None and found[0] != path and found[0] in self.modules \
                        and self._stores_wrapped_model(*found):
                    return True
        return False

    def _stores_wrapped_model(self, path: str, cls: str) -> bool:
        """Does class ``cls`` of module ``path`` assign a DDP/FSDP wrap to a ``self``
        attribute: ``self.model = DDP(...)``, or ``self.model = prepare_dp_model(...)``
        where the project function returns ``FSDP(...)`` (a46 RL2's ``FSDPWorker``)?"""
        module = self.modules[path]
        if module.wrapped_attributes.get(cls):
            return True
        return any(self.returned_tag(path, tag) for tag in module.attribute_returns.get(cls, {}).values())

    @property
    def _gets_wrapped_back(self) -> set[str]:
        """Modules that call a project function returning a DDP/FSDP-wrapped
        model (``model, opt = setup_for_distributed_mode(model, opt)``)."""
        if not hasattr(self, "_gets_back_cache"):
            self._gets_back_cache = {caller for key, calls in self.callers.items()
                                     if self._returns_a_wrap(key) for caller, _ in calls}
        return self._gets_back_cache

    def _returns_a_wrap(self, key: FunctionKey) -> bool:
        """Does the function hand back a DDP/FSDP-wrapped model, itself or through what
        another project function returns (``return self.model_init_full(model)``)?"""
        function = self.function(key)
        if function is None:
            return False
        return bool(function.returns_wrapped) or any(
            self.returned_tag(key[0], tag) for tag in function.returns_through.values())

    @property
    def _receives_wrapped(self) -> set[str]:
        if not hasattr(self, "_receives_cache"):
            self._receives_cache = {key[0] for key, params in self.ddp_params.items() if params}
        return self._receives_cache

    @property
    def _imported_by_ddp_modules(self) -> set[str]:
        """Project modules that a DDP module imports (``import utils``,
        ``from utils import f``, ``from . import utils``)."""
        if not hasattr(self, "_imported_cache"):
            self._imported_cache = {target for other_path, other in self.modules.items()
                                    if other.own_ddp_context for target in self.imported[other_path]}
        return self._imported_cache


def _argument_params(function: FunctionFacts, call: CallFact) -> tuple[str, ...]:
    """The parameters that positional arguments fill: without ``self`` for a
    bound call (``obj.fit(x)``, ``Trainer(x)``, ``self.fit(x)``, a classmethod
    ``Cls.make(x)``), with it for an explicit unbound one (``Base.__init__(self, x)``)."""
    params = function.params
    if not params or params[0] not in ("self", "cls"):
        return params
    holder = call.callee.rpartition(".")[0]
    unbound = not call.instance and params[0] == "self" and holder.split(".")[-1][:1].isupper()
    return params if unbound else params[1:]


def _a_real_call(call: CallFact) -> bool:
    """Not a reference handed to ``mp.spawn`` / ``Process(target=...)`` (its
    arguments come from ``args=``, not from the call's own slots): no slot past
    the positional arguments the call counts."""
    return call.positional is not None and not any(
        slot.isdigit() and int(slot) >= call.positional for slot in call.args)


def judged_call(callee: str, positional: Optional[int], keywords: tuple[str, ...],
                false_slots: tuple[str, ...]) -> CallFact:
    """A call the judge sees (``_judge_call``) with what it fills and the slots it gives
    False or None (``Project.call_reaches``'s ``call``)."""
    call = _judge_call(callee)
    call.positional, call.keywords, call.false_slots = positional, keywords, false_slots
    return call


def _judge_call(callee: str) -> CallFact:
    """A call as the judge names it (``ddplint.analysis.models.project_callee``):
    "Cls.method" stands for a call through an instance (bound), except
    ``Base.__init__(self, ...)``, which passes ``self`` itself."""
    holder, _, method = callee.rpartition(".")
    bound = FACTORY_CALL in callee or holder.split(".")[-1][:1].isupper() and method != "__init__"
    return CallFact(callee, "", False, False, instance=bound)


def _closure(starts: Iterable[str], edges: dict[str, set[str]]) -> set[str]:
    """Everything reachable from ``starts`` along ``edges``, the starts included."""
    seen = set(starts)
    stack = list(seen)
    while stack:
        for following in edges.get(stack.pop(), ()):
            if following not in seen:
                seen.add(following)
                stack.append(following)
    return seen


def _module_parts(path: str) -> list[str]:
    parts = [p for p in os.path.normpath(path).replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        return parts
    last = parts[-1]
    if last == "__init__.py":
        return parts[:-1]
    if last.endswith(".py"):
        parts[-1] = last[:-3]
    return parts


def _distance(directory: str, path: str) -> int:
    """How many steps ``os.path.relpath(path, directory)`` takes (both relative
    to the project root), from the paths' parts alone: the join resolves every
    module of a large project through this, and ``relpath`` asks the file system
    for the working directory on each call."""
    here, there = _path_parts(directory or "."), _path_parts(path)
    common = 0
    for mine, theirs in zip(here, there):
        if mine != theirs:
            break
        common += 1
    return (len(here) - common) + (len(there) - common)


@functools.lru_cache(maxsize=65536)
def _path_parts(path: str) -> tuple[str, ...]:
    return tuple(part for part in os.path.normpath(path).replace("\\", "/").split("/") if part not in ("", "."))
