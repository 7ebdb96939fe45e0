"""Offline validation of the course's Kubernetes manifests (no cluster needed).

Built-in kinds (Job, Service, ...) are checked with ``kubernetes-validate`` against the
Kubernetes OpenAPI schemas it ships, in strict mode: an unknown (say, misspelled) field
is an error, not a silently ignored key. The Kubeflow ``PyTorchJob`` is a custom
resource, so no Kubernetes schema knows it: it is checked against
``coursekit/schemas/pytorchjob-kubeflow.org-v1.json`` (strict too; its pod templates
against the Kubernetes PodTemplateSpec). Any other custom kind is refused: a resource
with no schema must never pass unchecked.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parent / "schemas"
CUSTOM = {("kubeflow.org/v1", "PyTorchJob"): SCHEMAS / "pytorchjob-kubeflow.org-v1.json"}


class ManifestError(ValueError):
    """A manifest failed validation, or no schema exists to validate it with."""


def kubernetes_version() -> str:
    from kubernetes_validate import utils

    return utils.latest_version()


def _definitions_registry(version: str) -> Registry:
    from kubernetes_validate import utils

    defs = utils.schema_contents(f"kubernetes-json-schema/v{version}-local-strict/"
                                 "_definitions.json", version)
    return Resource.from_contents(defs) @ Registry()


def validate_document(doc: dict, version: str | None = None) -> str:
    """Validate one resource; returns ``"Kind name"``. Raises ManifestError."""
    from kubernetes_validate import utils

    version = version or kubernetes_version()
    if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
        raise ManifestError("not a Kubernetes resource (apiVersion and kind are required)")
    label = f"{doc['kind']} {doc.get('metadata', {}).get('name', '?')}"
    custom = CUSTOM.get((doc["apiVersion"], doc["kind"]))
    try:
        if custom is not None:
            schema = json.loads(custom.read_text())
            registry = Resource.from_contents(schema) @ _definitions_registry(_full(version))
            jsonschema.Draft202012Validator(schema, registry=registry).validate(doc)
        else:
            utils.validate(doc, version, strict=True)
    except (jsonschema.ValidationError, utils.ValidationError) as e:
        where = "/".join(str(p) for p in e.path) or "(top level)"
        raise ManifestError(f"{label}: at {where}: {e.message}") from None
    except utils.SchemaNotFoundError:
        raise ManifestError(f"{label}: no schema for {doc['apiVersion']} {doc['kind']}: "
                            "a custom resource needs its schema added to coursekit/schemas"
                            ) from None
    return label


def validate_piece(obj, definition: str, where: str, version: str | None = None) -> None:
    """Validate a piece of a resource (a ``Volume``, a ``Toleration``: ``definition`` is its name
    in ``io.k8s.api.core.v1``) in strict mode, as Helm values hand them to a pod spec. Raises
    ManifestError naming ``where`` (the piece's place in its file)."""
    version = _full(version or kubernetes_version())
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$id": "https://kubernetes.io/api/piece",
              "$ref": f"/api/_definitions.json#/$defs/io.k8s.api.core.v1.{definition}"}
    validator = jsonschema.Draft202012Validator(schema, registry=_definitions_registry(version))
    error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
    if error is not None:
        at = "/".join(str(p) for p in error.path)
        raise ManifestError(f"{where}{'/' + at if at else ''} ({definition}): {error.message}")


def _full(version: str) -> str:
    from kubernetes_validate import utils

    wanted = utils.major_minor(version.lstrip("v"))
    return [v for v in utils.all_versions() if utils.major_minor(v) <= wanted][-1]


def validate_file(path: str | Path, version: str | None = None) -> list[str]:
    """Validate every document of a YAML file; returns their ``"Kind name"`` labels."""
    version = version or kubernetes_version()
    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    if not docs:
        raise ManifestError(f"{path}: no resources in it")
    return [validate_document(d, version) for d in docs]
