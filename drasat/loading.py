"""Reading YAML input files: documents in, plain dicts out; one model validates.

Every error names the file, the document number and, once validated, the object and field path.
This is the only module that parses user YAML (files, standard input, a ConfigMap's policy text).

Hostile input is bounded here, before any model sees it (docs/OBJECTS.md, "Input limits"):
- the size of one input (`DRASAT_MAX_INPUT_MIB`, default 64 MiB),
- the nesting depth of mappings and lists (`DRASAT_MAX_YAML_DEPTH`, default 100),
- the nodes reached through aliases (`DRASAT_MAX_YAML_ALIAS_NODES`, default 100,000), so a few
  hundred bytes of `&a`/`*a` cannot expand to millions of objects; recursive aliases are refused;
- explicit tags outside the YAML core schema (`!!str`, `!!int`, `!!float`, `!!bool`, `!!null`,
  `!!seq`, `!!map`) are refused, and a tagged scalar must be a valid value of its tag;
- integers must fit in 64 bits, as every integer of the Kubernetes API does.
Plain scalars that YAML 1.1 would read as timestamps stay strings (as kubectl sends them). Any
failure of the YAML library becomes an InputError naming the file (and line and column where the
library knows them); nothing else escapes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from drasat.api.inputerrors import InputError, describe_validation_error, show

ModelT = TypeVar("ModelT", bound=BaseModel)

MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Bounds on one YAML input; the defaults are read from the environment at each call."""

    max_bytes: int = 64 * MIB
    max_depth: int = 100
    max_alias_nodes: int = 100_000

    @classmethod
    def from_environment(cls) -> Limits:
        default = cls()
        return cls(
            max_bytes=env_limit("DRASAT_MAX_INPUT_MIB", default.max_bytes // MIB) * MIB,
            max_depth=env_limit("DRASAT_MAX_YAML_DEPTH", default.max_depth),
            max_alias_nodes=env_limit("DRASAT_MAX_YAML_ALIAS_NODES", default.max_alias_nodes),
        )


def env_limit(name: str, default: int) -> int:
    """A limit from the environment variable `name` (a positive integer), else `default`."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"expected a positive integer, got {show(text)}", where=name) from None
    if value < 1:
        raise InputError(f"expected a positive integer, got {value}", where=name)
    return value


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Explicit tags of the YAML core schema; anything else (`!!timestamp`, `!!binary`, `!foo`) is
#: refused.
_CORE = "tag:yaml.org,2002:"
SCALAR_TAGS = frozenset(f"{_CORE}{t}" for t in ("str", "int", "float", "bool", "null"))
COLLECTION_TAGS = {SequenceStartEvent: f"{_CORE}seq", MappingStartEvent: f"{_CORE}map"}
#: Longer than any 64-bit integer YAML can spell (binary with underscores, say): refused unparsed.
_MAX_INT_CHARS = 160


class _Resolver(Resolver):
    """YAML 1.1's implicit types without timestamps, `=` (value) and `!`/`&`/`*` (yaml) tags."""

    yaml_implicit_resolvers = {  # noqa: RUF012 (PyYAML's own class attribute)
        first: [
            (tag, regexp)
            for tag, regexp in resolvers
            if tag not in (f"{_CORE}timestamp", f"{_CORE}value", f"{_CORE}yaml")
        ]
        for first, resolvers in Resolver.yaml_implicit_resolvers.items()
    }


class _BoundedComposer(Composer):
    """PyYAML's composer with a depth bound, an alias-expansion bound and the tag checks."""

    limits: Limits

    @property
    def _events(self) -> Any:
        """The parser and resolver this composer is mixed with (untyped in PyYAML's stubs)."""
        return self

    def _setup(self, limits: Limits) -> None:
        self.limits = limits
        self._depth = 0
        #: Expanded size (nodes) of every finished node, by id; a node still being composed is
        #: absent, so an alias to it (a recursive structure) is found.
        self._sizes: dict[int, int] = {}
        #: How many levels below itself every finished node holds a collection (0: itself
        #: only, -1: a scalar), by id: an alias adds them where it stands.
        self._reach: dict[int, int] = {}
        self._alias_nodes = 0

    def compose_document(self) -> Any:
        node = super().compose_document()
        self._sizes = {}
        self._reach = {}
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self._events.peek_event()
        if isinstance(event, AliasEvent):
            anchor = event.anchor
            target = self.anchors.get(anchor)
            if target is not None:
                size = self._sizes.get(id(target))
                if size is None:
                    raise _error(f"alias *{anchor} refers to a node that contains it", event)
                self._alias_nodes += size
                if self._alias_nodes > self.limits.max_alias_nodes:
                    raise _error(
                        f"aliases expand to more than {self.limits.max_alias_nodes:,} nodes "
                        "(raise the limit with DRASAT_MAX_YAML_ALIAS_NODES)",
                        event,
                    )
                # The depth bound holds for what aliases expand to: anchored lists nested
                # around each other's aliases would otherwise reach any depth.
                reach = self._reach.get(id(target), -1)
                if reach >= 0 and self._depth + reach >= self.limits.max_depth:
                    raise _error(_too_deep(self.limits), event)
            return super().compose_node(parent, index)
        if isinstance(event, (SequenceStartEvent, MappingStartEvent)):
            tag = event.tag
            if tag not in (None, "!", COLLECTION_TAGS[type(event)]):
                raise _error(_bad_tag(tag), event)
            if self._depth >= self.limits.max_depth:
                raise _error(_too_deep(self.limits), event)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        # Sizes matter only inside an anchored node, which registers its anchor before its
        # children are composed: with no anchor yet, nothing needs them (the common case).
        if node is not None and self.anchors:
            self._sizes[id(node)] = 1 + sum(self._sizes.get(id(c), 1) for c in _children(node))
            self._reach[id(node)] = (
                -1
                if isinstance(node, ScalarNode)
                else 1 + max((self._reach.get(id(c), -1) for c in _children(node)), default=-1)
            )
        return node

    def compose_scalar_node(self, anchor: Any) -> ScalarNode:
        event = self._events.peek_event()
        node = super().compose_scalar_node(anchor)
        explicit = isinstance(event, ScalarEvent) and event.tag not in (None, "!")
        if explicit and node.tag not in SCALAR_TAGS:
            raise _error(_bad_tag(node.tag), event)
        if node.tag == f"{_CORE}str":
            return node
        implied = self._events.resolve(ScalarNode, node.value, (True, False))
        # `!!float 1` is a float too; otherwise a tag must agree with what the value reads as.
        widened = {implied, f"{_CORE}float"} if implied == f"{_CORE}int" else {implied}
        if explicit and node.tag not in widened:
            raise _error(f"{show(node.value)} is not a valid {_short(node.tag)}", event)
        if node.tag == f"{_CORE}int":
            _check_int(node.value, event)
        return node


def _too_deep(limits: Limits) -> str:
    return (
        f"nested deeper than {limits.max_depth} levels (raise the limit with DRASAT_MAX_YAML_DEPTH)"
    )


def _children(node: Node) -> Iterator[Node]:
    if isinstance(node, SequenceNode):
        yield from node.value
    elif isinstance(node, MappingNode):
        for key, value in node.value:
            yield key
            yield value


def _check_int(text: str, event: Any) -> None:
    digits = text.replace("_", "")
    if len(digits) <= _MAX_INT_CHARS:
        try:
            value = SafeConstructor.construct_yaml_int(
                _INT_CONSTRUCTOR, ScalarNode(_CORE + "int", text)
            )
        except ValueError:  # YAML 1.1's int pattern admits `0x_` and `0b_`
            raise _error(f"{show(text)} is not a valid !!int", event) from None
        if INT64_MIN <= value <= INT64_MAX:
            return
    shown = digits if len(digits) <= 24 else f"{digits[:12]}…{digits[-4:]} ({len(digits)} digits)"
    raise _error(f"integer {shown} does not fit in 64 bits", event)


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag


def _bad_tag(tag: str | None) -> str:
    return (
        f"explicit tag {show(_short(tag or ''))} is not allowed (only the core schema's !!str, "
        "!!int, !!float, !!bool, !!null, !!seq and !!map)"
    )


class _RefusedError(yaml.YAMLError):
    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


def _error(problem: str, event: Any) -> _RefusedError:
    return _RefusedError(problem, getattr(event, "start_mark", None))


class _IntConstructor(SafeConstructor):
    pass


_INT_CONSTRUCTOR = _IntConstructor()


class _PureLoader(Reader, Scanner, Parser, _BoundedComposer, SafeConstructor, _Resolver):
    """All in Python (PyYAML built without libyaml)."""

    def __init__(self, text: str, limits: Limits) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        _Resolver.__init__(self)
        self._setup(limits)

    def dispose(self) -> None:
        pass


def _make_loader() -> Callable[[str, Limits], Any]:
    try:
        from yaml._yaml import CParser
    except ImportError:  # pragma: no cover - PyYAML built without libyaml
        return _PureLoader

    class _FastLoader(_BoundedComposer, CParser, SafeConstructor, _Resolver):
        """libyaml's scanner and parser (fast; events only, no recursion) under the bounded
        composer; five times faster than the pure-Python reader."""

        def __init__(self, text: str, limits: Limits) -> None:
            CParser.__init__(self, text)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            _Resolver.__init__(self)
            self._setup(limits)

    return _FastLoader


_Loader = _make_loader()


def _make_composing_loader() -> Callable[[str], Any] | None:
    """libyaml's parser and composer both in C, or None where that is not safe: PyYAML without
    libyaml, or a libyaml that does not bound nesting itself (its composer recurses in C, so an
    unbounded depth could overflow the stack before any check of ours runs)."""
    try:
        from yaml._yaml import CParser
    except ImportError:  # pragma: no cover - PyYAML built without libyaml
        return None

    class _ComposingLoader(CParser, SafeConstructor, _Resolver):
        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            SafeConstructor.__init__(self)
            _Resolver.__init__(self)

    probe = _ComposingLoader("[" * 5000 + "]" * 5000)
    try:
        probe.get_single_node()
    except yaml.YAMLError:
        return _ComposingLoader  # refused: libyaml bounds the nesting (at 1,000 levels)
    finally:
        probe.dispose()
    return None  # pragma: no cover - a libyaml older than 0.2.5


#: The fast reading of `_read_plain`; None where only the bounded composer is safe.
_ComposingLoader = _make_composing_loader()
_STR, _INT, _FLOAT = f"{_CORE}str", f"{_CORE}int", f"{_CORE}float"
_SEQ, _MAP = COLLECTION_TAGS[SequenceStartEvent], COLLECTION_TAGS[MappingStartEvent]


def _read_plain(text: str, limits: Limits) -> list[Any] | None:
    """The documents of `text` read with libyaml's own composer (twice as fast as composing in
    Python), when they are plainly within every bound `_BoundedComposer` checks: no collection
    nested `max_depth` deep, no node reached twice (no alias is expanded, none refers to its own
    node), every tag one that reading implicitly could give or that the scalar's value agrees
    with, every integer of 64 bits. None otherwise, and on any error: the bounded composer then
    reads the input again and gives the one refusal it would have given. So this only ever
    accepts what that accepts, with the same data (the same parser and resolver make the same
    nodes, and each scalar is made by the same constructor)."""
    if _ComposingLoader is None:
        return None
    loader = _ComposingLoader(text)
    # Without `*` in the text there is no alias, so no node can be reached twice.
    aliases = _Aliases(limits.max_alias_nodes, limits.max_depth) if "*" in text else None
    try:
        raw = []
        while loader.check_node():
            raw.append(_plain(loader.get_node(), 0, limits.max_depth, loader, aliases))
            if aliases is not None:
                aliases.next_document()
        return raw
    except Exception:  # any failure (_NotPlain included): the bounded composer reports it
        return None
    finally:
        loader.dispose()


class _NotPlain(Exception):
    """A node `_BoundedComposer`'s checks could refuse: the input is read by it instead."""


class _Aliases:
    """The nodes of a document that aliases reach again, as `_BoundedComposer` counts them: an
    alias adds its node's expanded size to the file's count, which stays within
    `max_alias_nodes`; one to a node that contains it is refused. A node reached again gives
    the same object, as SafeConstructor's does."""

    def __init__(self, most: int, max_depth: int) -> None:
        self.most = most
        self.max_depth = max_depth
        self.expanded = 0
        self.next_document()

    def next_document(self) -> None:
        #: id(node) -> (its data, its expanded size, how many levels below itself it holds a
        #: collection: -1 for a scalar), once made; None while being made.
        self.made: dict[int, tuple[Any, int, int] | None] = {}
        self.size = 0
        #: The deepest collection (its depth) of the node being made, -1 for none yet.
        self.deepest = -1

    def again(self, node: Node, depth: int) -> tuple[bool, Any]:
        """(True, its data) for a node already made (counted as an alias, at `depth`); (False,
        None) for a node reached the first time."""
        key = id(node)
        if key not in self.made:
            self.made[key] = None
            return False, None
        found = self.made[key]
        if found is None:
            raise _NotPlain  # an alias to a node that contains it
        data, size, reach = found
        self.expanded += size
        self.size += size
        if self.expanded > self.most or (reach >= 0 and depth + reach >= self.max_depth):
            raise _NotPlain  # over the bound on aliases, or on depth through them
        if reach >= 0:
            self.deepest = max(self.deepest, depth + reach)
        return True, data

    def done(self, node: Node, data: Any, size: int, reach: int) -> None:
        self.made[id(node)] = (data, size, reach)


def _plain(node: Node, depth: int, max_depth: int, loader: Any, aliases: _Aliases | None) -> Any:
    """The data of a composed node, as SafeConstructor makes it, checked in the same walk
    against what `_BoundedComposer` checks; _NotPlain on anything they could refuse. `aliases`:
    where the text may hold aliases, what reaching a node again counts (else None)."""
    if aliases is not None:
        reached, known = aliases.again(node, depth)
        if reached:
            return known
        before, deepest_before = aliases.size, aliases.deepest
        aliases.deepest = -1
    tag = node.tag
    kind = node.__class__
    data: Any
    if kind is ScalarNode:
        if tag == _STR:
            data = node.value
        elif tag not in SCALAR_TAGS:
            raise _NotPlain
        else:
            # Implicitly read, a scalar's tag is what its value reads as; explicitly, an int's
            # value may be tagged !!float too.
            implied = loader.resolve(ScalarNode, node.value, (True, False))
            if tag != implied and not (tag == _FLOAT and implied == _INT):
                raise _NotPlain
            if tag == _INT:
                try:
                    _check_int(node.value, node)
                except _RefusedError:
                    raise _NotPlain from None
            data = loader.yaml_constructors[tag](loader, node)
    elif depth >= max_depth:
        raise _NotPlain
    elif kind is SequenceNode:
        if tag != _SEQ:
            raise _NotPlain
        data = [_plain(child, depth + 1, max_depth, loader, aliases) for child in node.value]
    elif kind is MappingNode and tag == _MAP:
        data = {}
        for key, value in node.value:
            data[_plain(key, depth + 1, max_depth, loader, aliases)] = _plain(
                value, depth + 1, max_depth, loader, aliases
            )
    else:
        raise _NotPlain
    if aliases is not None:
        # Its expanded size: itself, its children's nodes and what aliases among them expand to;
        # its reach: the deepest collection in it (through aliases too) below itself.
        aliases.size += 1
        deepest = aliases.deepest if kind is ScalarNode else max(aliases.deepest, depth)
        aliases.done(node, data, aliases.size - before, deepest - depth if deepest >= 0 else -1)
        aliases.deepest = max(deepest_before, deepest)
    return data


@dataclass(frozen=True)
class Document:
    """One YAML document: where it came from and its data (a mapping)."""

    source: str  # file name as the user gave it, or "<embedded>/name"
    number: int  # 1-based document number in the file
    data: dict[str, Any] = field(repr=False)

    @property
    def where(self) -> str:
        return f"{self.source}: document {self.number}"

    def describe(self, namespace: str | None = None) -> str:
        """`Kind namespace/name` of the object (quoted when odd); without a kind or a name, what
        the document holds instead: `Pod without metadata.name`, `an object ns/x without kind`,
        `a mapping without kind or metadata.name (keys: foo, bar)`. `namespace`: the one to show
        ("" for none, as for cluster-scoped kinds); None: the one its metadata names."""
        metadata = self.data.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        name, kind = metadata.get("name"), self.data.get("kind")
        if namespace is None:
            namespace = metadata.get("namespace") or ""
        ref = f"{show(namespace)}/{show(name)}" if namespace else show(name)
        has_name = name is not None and name != ""
        if kind is not None and kind != "":
            return f"{show(kind)} {ref}" if has_name else f"{show(kind)} without metadata.name"
        if has_name:
            return f"an object {ref} without kind"
        keys = [show(key) for key in list(self.data)[:6]]
        listed = ", ".join(keys[:5]) + (", ..." if len(keys) > 5 else "")
        return f"a mapping without kind or metadata.name (keys: {listed or 'none'})"

    def kind_text(self) -> str:
        """The document's kind; without one, what it holds (as `describe`)."""
        kind = self.data.get("kind")
        return show(kind) if kind is not None and kind != "" else self.describe()


def parse_documents(text: str, source: str, *, limits: Limits | None = None) -> list[Document]:
    """Split multi-document YAML; a `List` (kubectl get -o yaml) is unrolled into its items."""
    limits = limits or Limits.from_environment()
    if len(text) > limits.max_bytes:
        raise InputError(_too_big(len(text.encode("utf-8", "replace")), limits), where=source)
    raw = _read_plain(text, limits)
    if raw is None:
        raw = _read_bounded(text, source, limits)
    documents: list[Document] = []
    for number, data in enumerate(raw, start=1):
        if data is None:
            continue
        if not isinstance(data, dict):
            raise InputError(
                f"expected a mapping (a Kubernetes object), got {_yaml_type(data)}",
                where=f"{source}: document {number}",
            )
        documents.extend(_unroll(data, source, number))
    return documents


def _read_bounded(text: str, source: str, limits: Limits) -> list[Any]:
    """The documents of `text` read under every bound (`_BoundedComposer`); InputError on the
    first refusal or YAML error, naming the document."""
    raw: list[Any] = []
    loader = _Loader(text, limits)
    try:
        # Documents are read one by one so an error can say which document it is in.
        while loader.check_node():
            raw.append(loader.construct_document(loader.get_node()))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or (str(error).splitlines() or ["?"])[0]
        where = f"{source}: document {len(raw) + 1}"
        if isinstance(error, _RefusedError):  # a limit or a tag: the YAML itself is well formed
            at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            raise InputError(f"{at}{problem}", where=where) from None
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise InputError(f"malformed YAML{at}: {problem}", where=where) from None
    except (RecursionError, MemoryError) as error:
        # Bounded above; kept as a last line of defence: never a traceback.
        where = f"{source}: document {len(raw) + 1}"
        raise InputError(
            f"YAML too complex to read ({type(error).__name__})", where=where
        ) from None
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, OverflowError) as error:
        where = f"{source}: document {len(raw) + 1}"
        raise InputError(f"malformed YAML: {type(error).__name__}: {error}", where=where) from None
    finally:
        loader.dispose()
    return raw


def _too_big(size: int, limits: Limits) -> str:
    return (
        f"input is {size / MIB:.1f} MiB, over the limit of {limits.max_bytes // MIB} MiB "
        "(raise the limit with DRASAT_MAX_INPUT_MIB)"
    )


def _yaml_type(data: Any) -> str:
    return {list: "a list", str: "a string", int: "an integer", float: "a number"}.get(
        type(data), type(data).__name__
    )


def _unroll(data: dict[str, Any], source: str, number: int) -> Iterator[Document]:
    kind = data.get("kind")
    if isinstance(kind, str) and kind.endswith("List"):
        items = data.get("items") or []
        if not isinstance(items, list):
            raise InputError("items of a List must be a list", where=f"{source}: document {number}")
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise InputError(
                    f"items[{index}]: List items must be mappings",
                    where=f"{source}: document {number}",
                )
            yield Document(source, number, item)
    else:
        yield Document(source, number, data)


def read_documents(path: str | Path, *, limits: Limits | None = None) -> list[Document]:
    """Read and split a YAML file ('-' is standard input)."""
    limits = limits or Limits.from_environment()
    name = str(path)
    try:
        if name == "-":
            text = _stdin(limits.max_bytes + 1)
        else:
            size = Path(path).stat().st_size
            if size > limits.max_bytes:
                raise InputError(_too_big(size, limits), where=name)
            text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", where=name) from None
    except UnicodeDecodeError as error:
        raise InputError(
            f"not UTF-8 text: byte {error.start} is {error.object[error.start :][:1]!r}",
            where=name,
        ) from None
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror or error}", where=name) from None
    return parse_documents(text, name, limits=limits)


def _stdin(most: int) -> str:
    import sys

    return sys.stdin.read(most)


def validate(model: type[ModelT], document: Document) -> ModelT:
    """Validate one document against a model; errors name file, document, object and field path."""
    try:
        return model.model_validate(document.data)
    except ValidationError as error:
        raise InputError(
            describe_validation_error(error, model=model, kind=str(document.data.get("kind", ""))),
            where=f"{document.where}: {document.describe()}",
        ) from None
    except RecursionError:
        raise InputError(
            "nested too deeply to validate", where=f"{document.where}: {document.describe()}"
        ) from None


def load_one(model: type[ModelT], path: str | Path, *, kind: str) -> ModelT:
    """A file that holds exactly one object of `kind` (a policy file, say)."""
    documents = read_documents(path)
    matching = [d for d in documents if d.data.get("kind") == kind]
    if len(documents) != 1 or len(matching) != 1:
        kinds = ", ".join(d.kind_text() for d in documents[:10]) or "nothing"
        raise InputError(f"expected exactly one {kind}, found {kinds}", where=str(path))
    return validate(model, matching[0])
