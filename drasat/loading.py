"""Reading YAML input files: documents in, plain dicts out; one model validates.

Every error names the file, the document number and, once validated, the object and field path.
This is the only module that parses user YAML files.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from drasat.api.errors import InputError, describe_validation_error

ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True)
class Document:
    """One YAML document: where it came from and its data (a mapping)."""

    source: str  # file name as the user gave it, or "<embedded>/name"
    number: int  # 1-based document number in the file
    data: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.source}: document {self.number}"

    def describe(self) -> str:
        """`kind namespace/name` of the object, as far as it says."""
        metadata = self.data.get("metadata") or {}
        name = metadata.get("name", "?") if isinstance(metadata, dict) else "?"
        namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
        ref = f"{namespace}/{name}" if namespace else str(name)
        return f"{self.data.get('kind', '?')} {ref}"


def parse_documents(text: str, source: str) -> list[Document]:
    """Split multi-document YAML; a `List` (kubectl get -o yaml) is unrolled into its items."""
    raw: list[Any] = []
    try:
        # Documents are read one by one so an error can say which document it is in.
        for data in yaml.safe_load_all(text):
            raw.append(data)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        where = f"{source}: document {len(raw) + 1}"
        raise InputError(f"malformed YAML{at}: {problem}", where=where) from None
    documents: list[Document] = []
    for number, data in enumerate(raw, start=1):
        if data is None:
            continue
        if not isinstance(data, dict):
            raise InputError(
                f"expected a mapping (a Kubernetes object), got {type(data).__name__}",
                where=f"{source}: document {number}",
            )
        documents.extend(_unroll(data, source, number))
    return documents


def _unroll(data: dict[str, Any], source: str, number: int) -> Iterator[Document]:
    if data.get("kind") == "List" or str(data.get("kind", "")).endswith("List"):
        items = data.get("items") or []
        if not isinstance(items, list):
            raise InputError("items of a List must be a list", where=f"{source}: document {number}")
        for item in items:
            if not isinstance(item, dict):
                raise InputError(
                    "List items must be mappings", where=f"{source}: document {number}"
                )
            yield Document(source, number, item)
    else:
        yield Document(source, number, data)


def read_documents(path: str | Path) -> list[Document]:
    """Read and split a YAML file ('-' is standard input)."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8") if name != "-" else _stdin()
    except FileNotFoundError:
        raise InputError("no such file", where=name) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read: {error}", where=name) from None
    return parse_documents(text, name)


def _stdin() -> str:
    import sys

    return sys.stdin.read()


def validate(model: type[ModelT], document: Document) -> ModelT:
    """Validate one document against a model; errors name file, document, object and field path."""
    try:
        return model.model_validate(document.data)
    except ValidationError as error:
        raise InputError(
            describe_validation_error(error), where=f"{document.where}: {document.describe()}"
        ) from None


def load_one(model: type[ModelT], path: str | Path, *, kind: str) -> ModelT:
    """A file that holds exactly one object of `kind` (a policy file, say)."""
    documents = read_documents(path)
    matching = [d for d in documents if d.data.get("kind") == kind]
    if len(documents) != 1 or len(matching) != 1:
        kinds = ", ".join(str(d.data.get("kind", "?")) for d in documents) or "nothing"
        raise InputError(f"expected exactly one {kind}, found {kinds}", where=str(path))
    return validate(model, matching[0])
