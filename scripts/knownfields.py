#!/usr/bin/env python3
"""Write drasat/whatif/knownfields.json: the fields kube-apiserver's Go structs have and the type
of each field's value, for the pods and the workloads with pod templates the what-if reads
(Pod, Deployment, ReplicaSet, StatefulSet, Job, DaemonSet, CronJob), the PodGroups that make
gangs and the `resource.k8s.io/v1` claims, templates and classes, read from the OpenAPI v3
documents a real kube-apiserver serves.

The what-if refuses a field these structs lack, and a value that does not decode into its
field's type, as the API server's decoding does (`drasat/whatif/knownfields.py`). Run again
when the Kubernetes version changes:

    .venv/bin/python scripts/knownfields.py            # starts the v1.37.2 control plane
    .venv/bin/python scripts/knownfields.py --from openapi.json   # a saved dump of the four
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "drasat" / "whatif" / "knownfields.json"
DOCUMENTS = (
    "api/v1",
    "apis/apps/v1",
    "apis/batch/v1",
    "apis/scheduling.k8s.io/v1beta1",
    "apis/resource.k8s.io/v1",
)
#: "apiVersion kind" -> the struct of the object.
ROOTS = {
    "v1 Pod": "io.k8s.api.core.v1.Pod",
    "apps/v1 Deployment": "io.k8s.api.apps.v1.Deployment",
    "apps/v1 ReplicaSet": "io.k8s.api.apps.v1.ReplicaSet",
    "apps/v1 StatefulSet": "io.k8s.api.apps.v1.StatefulSet",
    "batch/v1 Job": "io.k8s.api.batch.v1.Job",
    "apps/v1 DaemonSet": "io.k8s.api.apps.v1.DaemonSet",
    "batch/v1 CronJob": "io.k8s.api.batch.v1.CronJob",
    "scheduling.k8s.io/v1beta1 PodGroup": "io.k8s.api.scheduling.v1beta1.PodGroup",
    "resource.k8s.io/v1 ResourceClaim": "io.k8s.api.resource.v1.ResourceClaim",
    "resource.k8s.io/v1 ResourceClaimTemplate": "io.k8s.api.resource.v1.ResourceClaimTemplate",
    "resource.k8s.io/v1 DeviceClass": "io.k8s.api.resource.v1.DeviceClass",
}
#: Values with a decoder of their own: what each takes (`knownfields.py` reads these names).
OWN_DECODERS = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "int-or-string",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "string",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "string",
}
_PREFIX = "#/components/schemas/"


def served() -> dict[str, Any]:
    """The OpenAPI v3 documents of core/v1, apps/v1 and batch/v1, from a real kube-apiserver."""
    import kubernetes

    from drasat.testbed.controlplane import binaries, realcluster

    directory = pathlib.Path(tempfile.mkdtemp(prefix="knownfields-"))
    cluster = realcluster.Cluster.start(
        directory=directory, bin_dir=binaries.locate(classic=False), die_with_parent=True
    )
    try:
        client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
        with client:
            out = {}
            for path in DOCUMENTS:
                url = f"{client.configuration.host}/openapi/v3/{path}"
                token = client.configuration.api_key.get("BearerToken", "")
                headers = {**client.default_headers, "Authorization": token}
                response = client.call_api("GET", url, header_params=headers)
                response.read()
                out[path] = json.loads(response.data)
            return out
    finally:
        cluster.stop()


def _shape(schema: dict[str, Any]) -> str:
    """A field's type: "T" (the struct T, a name with dots), "[X" (a list of X), "{X" (a map
    from strings to X), a scalar the decoder checks ("string", "string-enum": a named string
    type, "int32", "int64", "bool", "float64", "quantity", "int-or-string"), or "" (a value
    taken whole, unchecked: raw JSON, an object that keeps unknown fields)."""
    if "allOf" in schema and len(schema["allOf"]) == 1:
        schema = schema["allOf"][0]
    if "$ref" in schema:
        name = str(schema["$ref"]).removeprefix(_PREFIX)
        return OWN_DECODERS.get(name, name)
    kind = schema.get("type")
    if kind == "array":
        inner = _shape(schema.get("items") or {})
        return f"[{inner}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"{{{_shape(schema['additionalProperties'])}"
    if kind == "string":
        if schema.get("format") == "byte":
            return ""  # base64 in a string, decoded into []byte: not checked here
        return "string-enum" if schema.get("enum") else "string"
    if kind == "integer":
        return "int32" if schema.get("format") == "int32" else "int64"
    if kind == "boolean":
        return "bool"
    if kind == "number":
        return "float64"
    return ""


def _empty_struct(name: str, schema: dict[str, Any]) -> bool:
    """A Kubernetes API struct without fields (a PodGroup's `basic` policy): the decoder
    refuses any field in it. apimachinery's objects without properties (FieldsV1,
    RawExtension) it takes whole instead; OpenAPI spells both alike."""
    return name.startswith("io.k8s.api.") and schema.get("type") == "object"


def known_fields(documents: dict[str, Any]) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for document in documents.values():
        schemas.update(document["components"]["schemas"])
    structs: dict[str, dict[str, str]] = {}
    todo = list(ROOTS.values())
    while todo:
        name = todo.pop()
        if name in structs:
            continue
        schema = schemas[name]
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            continue
        if "properties" not in schema and not _empty_struct(name, schema):
            continue  # a value the decoder takes whole (Quantity, Time, RawExtension, FieldsV1)
        properties = schema.get("properties") or {}
        fields = {field: _shape(spec) for field, spec in sorted(properties.items())}
        structs[name] = fields
        todo.extend(shape.lstrip("[{") for shape in fields.values() if "." in shape)
    # A reference to a struct without fields of its own is a value taken whole.
    for fields in structs.values():
        for field, shape in fields.items():
            inner = shape.lstrip("[{")
            if "." in inner and inner not in structs:
                fields[field] = ""
    return {"roots": ROOTS, "structs": dict(sorted(structs.items()))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", help="a saved dump of the OpenAPI documents")
    args = parser.parse_args()
    documents = json.loads(pathlib.Path(args.source).read_text()) if args.source else served()
    OUT.write_text(json.dumps(known_fields(documents), indent=0, sort_keys=True) + "\n")
    print(OUT.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
