"""The Kubernetes manifests validate offline, strictly; typos and unknown kinds fail."""

import copy
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from coursekit import k8s

MANIFESTS = sorted((ROOT / "launchers" / "k8s").glob("*.yaml"))


def docs(name):
    return [d for d in yaml.safe_load_all((ROOT / "launchers" / "k8s" / name).read_text()) if d]


def test_there_are_manifests_for_both_ways():
    assert {p.name for p in MANIFESTS} == {"indexed-job.yaml", "pytorchjob.yaml"}
    kinds = sorted(d["kind"] for p in MANIFESTS for d in docs(p.name))
    assert kinds == ["Job", "PyTorchJob", "Service"]


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_in_strict_mode(manifest):
    assert k8s.validate_file(manifest)


def _pod_spec(doc):
    if doc["kind"] == "Job":
        return doc["spec"]["template"]["spec"]
    return doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]


@pytest.mark.parametrize("kind, path, good, typo", [
    ("Job", ("spec",), "completionMode", "completionsMode"),
    ("Job", ("spec", "template", "spec"), "subdomain", "subDomain"),
    ("Service", ("spec",), "clusterIP", "clusterIp"),
    ("PyTorchJob", ("spec",), "elasticPolicy", "elasticPolicies"),
    ("PyTorchJob", ("spec", "elasticPolicy"), "rdzvBackend", "rdzvbackend"),
    ("PyTorchJob", ("spec", "pytorchReplicaSpecs", "Worker"), "restartPolicy", "restartPolcy"),
])  # fmt: skip
def test_a_misspelled_field_fails(kind, path, good, typo):
    (doc,) = [d for p in MANIFESTS for d in docs(p.name) if d["kind"] == kind]
    k8s.validate_document(doc)  # the original passes
    bad = copy.deepcopy(doc)
    node = bad
    for key in path:
        node = node[key]
    node[typo] = node.pop(good)
    with pytest.raises(k8s.ManifestError, match=typo):
        k8s.validate_document(bad)


@pytest.mark.parametrize("kind", ["Job", "PyTorchJob"])
def test_a_misspelled_container_field_fails(kind):
    (doc,) = [d for p in MANIFESTS for d in docs(p.name) if d["kind"] == kind]
    bad = copy.deepcopy(doc)
    container = _pod_spec(bad)["containers"][0]
    container["imagePullPolcy"] = "IfNotPresent"
    with pytest.raises(k8s.ManifestError, match="imagePullPolcy"):
        k8s.validate_document(bad)


def test_wrong_values_fail():
    (job,) = [d for d in docs("pytorchjob.yaml")]
    bad = copy.deepcopy(job)
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    with pytest.raises(k8s.ManifestError, match="Sometimes"):
        k8s.validate_document(bad)
    bad = copy.deepcopy(job)
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(k8s.ManifestError, match="two"):
        k8s.validate_document(bad)


def test_a_custom_kind_without_a_schema_is_refused():
    (job,) = docs("pytorchjob.yaml")
    other = {**copy.deepcopy(job), "kind": "TFJob"}
    with pytest.raises(k8s.ManifestError, match="no schema for kubeflow.org/v1 TFJob"):
        k8s.validate_document(other)
    with pytest.raises(k8s.ManifestError, match="not a Kubernetes resource"):
        k8s.validate_document({"spec": {}})


def test_plain_job_uses_the_completion_index_and_the_first_pod():
    service, job = docs("indexed-job.yaml")
    assert service["spec"]["clusterIP"] == "None"
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    args = " ".join(_pod_spec(job)["containers"][0]["args"])
    # c10d, not the static rendezvous: its agent store is always shared with the workers
    # (static_tcp_rendezvous.py: use_agent_store is True), whatever
    # TORCH_DISABLE_SHARE_RDZV_TCP_STORE says; c10d reads it (dynamic_rendezvous.py)
    assert "--rdzv-backend=c10d" in args and "--master-addr" not in args
    assert f"--rdzv-endpoint={job['metadata']['name']}-0.{service['metadata']['name']}:" in args
    assert "--node-rank" not in args  # c10d gives the node ranks; torchrun ignores it there
    assert f"--nnodes={job['spec']['completions']}" in args
    env = {e["name"]: e["value"] for e in _pod_spec(job)["containers"][0]["env"]}
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_why_c10d_as_this_torch_does_it():
    """What the manifest's comment says: torchrun's default is static, whose agent store is
    shared whatever the variable says; the c10d handler reads the variable."""
    import inspect

    from torch.distributed import run
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous, static_tcp_rendezvous

    assert run.get_args_parser().parse_args(["x.py"]).rdzv_backend == "static"
    assert static_tcp_rendezvous.StaticTCPRendezvous.use_agent_store.fget(None) is True
    assert 'os.getenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0")' in \
        inspect.getsource(dynamic_rendezvous.DynamicRendezvousHandler)


def test_every_manifest_runs_the_course_image_and_launcher():
    # the GPU cluster's image: the CUDA flavour, as the GPU compose override names it
    compose = yaml.safe_load((ROOT / "docker" / "compose.gpu.yaml").read_text())
    image = compose["services"]["lab"]["image"]
    for p in MANIFESTS:
        for doc in docs(p.name):
            if doc["kind"] != "Service":
                container = _pod_spec(doc)["containers"][0]
                assert container["image"] == image
                assert "launchers/multinode_train.py" in container["args"]  \
                    or any("launchers/multinode_train.py" in a for a in container["args"])
    assert Path(ROOT / "launchers" / "multinode_train.py").exists()
