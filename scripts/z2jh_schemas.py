"""Write the vendored Zero to JupyterHub schemas of coursekit/schemas from the projects' sources.

    python scripts/z2jh_schemas.py Z2JH_GIT KUBESPAWNER_GIT JUPYTERHUB_GIT

Each argument is a git directory (a clone, or a bare mirror) of jupyterhub/zero-to-jupyterhub-k8s,
jupyterhub/kubespawner and jupyterhub/jupyterhub. It reads, at the chart's release tag:

- the chart's ``jupyterhub/values.schema.yaml``, with its ``description`` keys dropped as the
  chart's own tools/generate-json-schema.py does -> ``z2jh-values-<chart>.json``;
- the chart's ``jupyterhub/values.yaml`` (its defaults: Helm validates the merged values) ->
  ``z2jh-defaults-<chart>.json``;
- the configurable traits of KubeSpawner and Spawner (the keys a profile's
  ``kubespawner_override`` may set: kubespawner sets any key, a misspelled one silently) and of
  the authenticator the values use, at the versions the chart's hub image pins
  (images/hub/requirements.txt) -> ``z2jh-hub-<chart>.json``. The chart's own schema leaves
  ``singleuser.profileList`` and ``hub.config`` open (any content).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

CHART = "4.4.0"
SCHEMAS = Path(__file__).resolve().parent.parent / "coursekit" / "schemas"
JSON_TYPES = {"Float": "number", "Integer": "integer", "Int": "integer", "Unicode": "string",
              "Bool": "boolean", "Dict": "object", "List": "array", "Set": "array",
              "Tuple": "array", "ByteSpecification": ["string", "number"]}


def show(git: str, ref: str, path: str) -> str:
    return subprocess.run(["git", "-C", git, "show", f"{ref}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def commit(git: str, ref: str) -> str:
    return subprocess.run(["git", "-C", git, "rev-list", "-n1", ref], check=True,
                          capture_output=True, text=True).stdout.strip()


def drop_descriptions(node: dict) -> None:
    """tools/generate-json-schema.py's clean_jsonschema: no description at any level."""
    node.pop("description", None)
    for value in (node.get("properties") or {}).values():
        if isinstance(value, dict):
            drop_descriptions(value)


def traits(source: str, cls: str) -> dict[str, object]:
    """Configurable traits of class ``cls`` in ``source``: name -> a JSON schema of its type."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and node.name == cls):
            continue
        for st in node.body:
            if not (isinstance(st, ast.Assign) and len(st.targets) == 1
                    and isinstance(st.targets[0], ast.Name)
                    and "config=True" in ast.unparse(st.value)):
                continue
            value = st.value
            while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                   and value.func.attr == "tag"):
                value = value.func.value
            kind = ast.unparse(value.func).split(".")[-1] if isinstance(value, ast.Call) else ""
            json_type = JSON_TYPES.get(kind)
            found[st.targets[0].id] = ({"type": [*([json_type] if isinstance(json_type, str)
                                                   else json_type), "null"]}
                                       if json_type else {})
    return found


def pinned(requirements: str, name: str) -> str:
    return re.search(rf"^{re.escape(name)}==(\S+)", requirements, re.M).group(1)


def main(z2jh: str, kubespawner: str, jupyterhub: str) -> None:
    import yaml

    source = f"jupyterhub/zero-to-jupyterhub-k8s {CHART} ({commit(z2jh, CHART)})"
    schema = yaml.safe_load(show(z2jh, CHART, "jupyterhub/values.schema.yaml"))
    drop_descriptions(schema)
    schema = {"$comment": f"Zero to JupyterHub chart {CHART}: jupyterhub/values.schema.yaml of "
                          f"{source}, descriptions dropped (scripts/z2jh_schemas.py)", **schema}
    defaults = {"$comment": f"the defaults of the Zero to JupyterHub chart {CHART}: "
                            f"jupyterhub/values.yaml of {source} (scripts/z2jh_schemas.py)",
                "values": yaml.safe_load(show(z2jh, CHART, "jupyterhub/values.yaml"))}
    reqs = show(z2jh, CHART, "images/hub/requirements.txt")
    ks_ver, jh_ver = pinned(reqs, "jupyterhub-kubespawner"), pinned(reqs, "jupyterhub")
    spawner = {**traits(show(jupyterhub, jh_ver, "jupyterhub/spawner.py"), "Spawner"),
               **traits(show(kubespawner, ks_ver, "kubespawner/spawner.py"), "KubeSpawner")}
    auth = {**traits(show(jupyterhub, jh_ver, "jupyterhub/auth.py"), "Authenticator"),
            **traits(show(jupyterhub, jh_ver, "jupyterhub/authenticators/shared.py"),
                     "SharedPasswordAuthenticator")}
    app = traits(show(jupyterhub, jh_ver, "jupyterhub/app.py"), "JupyterHub")
    override = {"type": "object", "additionalProperties": False,
                "properties": dict(sorted(spawner.items()))}
    choice = {"type": "object", "additionalProperties": False,
              "properties": {"display_name": {"type": "string"}, "default": {"type": "boolean"},
                             "kubespawner_override": {"$ref": "#/$defs/override"}}}
    unlisted = {"type": "object", "additionalProperties": False, "properties": {
        "enabled": {"type": "boolean"}, "display_name": {"type": "string"},
        "display_name_in_choices": {"type": "string"}, "validation_regex": {"type": "string"},
        "validation_message": {"type": "string"},
        "kubespawner_override": {"$ref": "#/$defs/override"}}}
    option = {"type": "object", "additionalProperties": False, "required": ["display_name"],
              "properties": {"display_name": {"type": "string"},
                             "choices": {"type": "object",
                                         "additionalProperties": {"$ref": "#/$defs/choice"}},
                             "unlisted_choice": {"$ref": "#/$defs/unlisted"}}}
    profile = {"type": "object", "additionalProperties": False, "required": ["display_name"],
               "properties": {"display_name": {"type": "string"}, "slug": {"type": "string"},
                              "description": {"type": "string"}, "default": {"type": "boolean"},
                              "kubespawner_override": {"$ref": "#/$defs/override"},
                              "profile_options": {
                                  "type": "object",
                                  "additionalProperties": {"$ref": "#/$defs/option"}}}}
    hub = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"what the chart's schema leaves open (singleuser.profileList, hub.config), "
                    f"from the traits of kubespawner {ks_ver} ({commit(kubespawner, ks_ver)}) and "
                    f"jupyterhub {jh_ver} ({commit(jupyterhub, jh_ver)}), the versions the hub "
                    f"image of chart {CHART} pins (scripts/z2jh_schemas.py). Strict: a key that is "
                    "no trait is an error.",
        "$defs": {"override": override, "choice": choice, "unlisted": unlisted,
                  "option": option, "profile": profile},
        "properties": {
            "profileList": {"type": "array", "items": {"$ref": "#/$defs/profile"}},
            "hubConfig": {"type": "object", "properties": {
                "JupyterHub": {"type": "object", "additionalProperties": False,
                               "properties": dict(sorted(app.items()))},
                "SharedPasswordAuthenticator": {"type": "object", "additionalProperties": False,
                                                "properties": dict(sorted(auth.items()))},
                "KubeSpawner": override}},
        },
    }
    for name, doc in ((f"z2jh-values-{CHART}.json", schema),
                      (f"z2jh-defaults-{CHART}.json", defaults), (f"z2jh-hub-{CHART}.json", hub)):
        (SCHEMAS / name).write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
        print(f"wrote coursekit/schemas/{name}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
