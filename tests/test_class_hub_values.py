"""The Zero to JupyterHub values validate offline, strictly; a misspelled key anywhere fails."""

import copy
import json

import pytest
import yaml
from conftest import ROOT

from coursekit import z2jh

VALUES = ROOT / "jupyter" / "class-hub" / "z2jh-values.yaml"


def values():
    return yaml.safe_load(VALUES.read_text())


def test_the_values_validate():
    checked = z2jh.validate_file(VALUES)
    assert len(checked) == 3


def test_the_vendored_schemas_name_their_source():
    for name in ("values", "defaults", "hub"):
        doc = json.loads((z2jh.SCHEMAS / f"z2jh-{name}-{z2jh.CHART_VERSION}.json").read_text())
        assert z2jh.CHART_VERSION in doc["$comment"]
        assert "jupyterhub/zero-to-jupyterhub-k8s" in doc["$comment"] or name == "hub"
    hub = json.loads((z2jh.SCHEMAS / f"z2jh-hub-{z2jh.CHART_VERSION}.json").read_text())
    assert "kubespawner 7.0.0" in hub["$comment"] and "jupyterhub 5.5.0" in hub["$comment"]


def test_the_values_say_what_the_class_needs():
    v = values()
    su = v["singleuser"]
    assert su["image"]["name"].endswith("/ddp-course") and su["image"]["tag"] == "torch2.13.0-cuda"
    limits = [p.get("kubespawner_override", {}).get("extra_resource_limits", {})
              for p in su["profileList"]]
    assert {"nvidia.com/gpu": "1"} in limits and {"nvidia.com/gpu": "4"} in limits
    assert any(key.startswith("nvidia.com/mig-") for lim in limits for key in lim)
    assert {"name": "shm", "mountPath": "/dev/shm"} in su["storage"]["extraVolumeMounts"]
    assert su["storage"]["extraVolumes"][0]["emptyDir"]["medium"] == "Memory"
    assert v["cull"]["enabled"] and v["cull"]["timeout"] <= 3600
    assert v["prePuller"]["hook"]["enabled"] and v["prePuller"]["continuous"]["enabled"]
    assert v["hub"]["config"]["JupyterHub"]["authenticator_class"] == "shared-password"
    assert "user_password" not in v["hub"]["config"]["SharedPasswordAuthenticator"]


def test_helm_merge_merges_maps_replaces_lists_and_null_removes():
    defaults = {"a": {"b": 1, "c": [1, 2]}, "d": 3}
    assert z2jh.helm_merge(defaults, {"a": {"c": [9]}, "d": None}) == {"a": {"b": 1, "c": [9]}}
    assert defaults == {"a": {"b": 1, "c": [1, 2]}, "d": 3}


def _set(doc, path, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _rename(doc, path, typo):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[typo] = node.pop(path[-1])


# a key of each part, misspelled: the chart's strict schema, the open subtrees checked against
# KubeSpawner's and JupyterHub's traits, and the Kubernetes objects inside the values
@pytest.mark.parametrize("path, typo", [
    (("cull",), "cul"),
    (("cull", "timeout"), "timout"),
    (("singleuser", "storage", "homeMountPath"), "homeMountPth"),
    (("prePuller", "continuous"), "continous"),
    (("scheduling", "userPlaceholder", "replicas"), "replica"),
    (("singleuser", "profileList", 1, "kubespawner_override", "mem_limit"), "mem_limt"),
    (("singleuser", "profileList", 1, "kubespawner_override", "extra_resource_limits"),
     "extra_resource_limit"),
    (("singleuser", "profileList", 1, "display_name"), "displayname"),
    (("hub", "config", "SharedPasswordAuthenticator", "allowed_users"), "allowed_user"),
    (("hub", "config", "JupyterHub", "authenticator_class"), "authenticator_clas"),
    (("singleuser", "storage", "extraVolumes", 0, "emptyDir", "medium"), "medum"),
    (("singleuser", "storage", "extraVolumeMounts", 0, "mountPath"), "mountpath"),
    (("singleuser", "extraTolerations", 0, "effect"), "efect"),
    (("singleuser", "lifecycleHooks", "postStart", "exec"), "exek"),
])  # fmt: skip
def test_a_misspelled_key_fails(path, typo):
    bad = copy.deepcopy(values())
    _rename(bad, path, typo)
    # named as unexpected, or its right spelling as missing (a required key)
    with pytest.raises(z2jh.ValuesError, match=f"(?i){typo}"):
        z2jh.validate_values(bad)


def test_a_misspelled_key_in_a_written_copy_fails(tmp_path):
    """The file as written: one key misspelled in a copy of it fails, the original passes."""
    text = VALUES.read_text()
    assert text.count("  cull:") == 0 and text.count("\ncull:\n  enabled: true") == 1
    copy_path = tmp_path / "values.yaml"
    copy_path.write_text(text.replace("\ncull:\n  enabled: true", "\ncull:\n  enable: true"))
    with pytest.raises(z2jh.ValuesError, match="enable"):
        z2jh.validate_file(copy_path)


@pytest.mark.parametrize("path, value, match", [
    (("singleuser", "profileList", 1, "kubespawner_override", "extra_resource_limits",
      "nvidia.com/gpu"), 1, "quantity"),
    (("singleuser", "profileList", 1, "kubespawner_override", "cpu_limit"), "eight", "eight"),
    (("cull", "timeout"), "30m", "30m"),
    (("singleuser", "image", "pullPolicy"), "Sometimes", "Sometimes"),
])  # fmt: skip
def test_a_wrong_value_fails(path, value, match):
    bad = copy.deepcopy(values())
    _set(bad, path, value)
    with pytest.raises(z2jh.ValuesError, match=match):
        z2jh.validate_values(bad)


def test_a_misspelled_override_in_a_profile_option_fails():
    bad = copy.deepcopy(values())
    bad["singleuser"]["profileList"][0]["profile_options"] = {"image": {
        "display_name": "Image", "choices": {"cpu": {"display_name": "CPU", "default": True,
                                                     "kubespawner_override": {"imag": "x"}}}}}
    with pytest.raises(z2jh.ValuesError, match="imag"):
        z2jh.validate_values(bad)
