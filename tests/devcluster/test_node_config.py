"""A real node's configuration, as pure functions (gpustack_worker/devcluster/node_config.py and the
API server's flags in real_nodes.py): what a kubelet, containerd, the CNI bridge and kube-proxy are told."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gpustack_worker.devcluster.node_config import (
    CLUSTER_CIDR,
    RUN_ROOT,
    NodeLayout,
    cni_conflist,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
    pod_subnet,
    toml,
)
from gpustack_worker.devcluster.pki import Pki
from gpustack_worker.devcluster.real_nodes import RealNodes, apiserver_flags

#: A long test directory, as pytest's temporary directories are.
CLUSTER = Path("/tmp/pytest-of-root/pytest-123/test_a_long_name_of_a_test_module0/gpustack-real-nodes-abcdef")
UNIX_SOCKET_PATH_MAX = 107


def layout(index: int = 0, cluster: Path = CLUSTER) -> NodeLayout:
    return NodeLayout(cluster, index, f"devcluster-node-{index}")


@pytest.mark.parametrize(
    ("index", "subnet"), [(0, "10.244.0.0/24"), (1, "10.244.1.0/24"), (255, "10.244.255.0/24")]
)
def test_each_node_has_its_own_slash_24_of_the_cluster_cidr(index: int, subnet: str) -> None:
    assert pod_subnet(index) == subnet
    assert CLUSTER_CIDR == "10.244.0.0/16"


@pytest.mark.parametrize("index", [-1, 256])
def test_a_node_index_outside_the_cluster_cidr_is_refused(index: int) -> None:
    with pytest.raises(ValueError, match=r"0\.\.255"):
        pod_subnet(index)


def test_nodes_of_one_cluster_and_of_two_clusters_never_share_a_path_or_bridge() -> None:
    a0, a1, b0 = layout(0), layout(1), layout(0, CLUSTER.with_name("other"))
    for x, y in ((a0, a1), (a0, b0)):
        assert x.run != y.run and x.state != y.state and x.config != y.config
    assert a0.bridge != a1.bridge
    assert len(a0.bridge) <= 15  # an interface name's limit


def test_containerd_listens_on_a_socket_short_enough_for_a_unix_address() -> None:
    lay = layout(15)
    assert lay.containerd_socket.is_relative_to(RUN_ROOT)
    assert len(str(lay.containerd_socket).encode()) <= UNIX_SOCKET_PATH_MAX


def test_containerd_config_is_toml_with_cri_on_runc_cgroupfs_our_pause_and_the_nodes_cni() -> None:
    lay = layout(1)
    text = toml(
        containerd_config(
            lay, runc=Path("/r/runc"), cni_bin=Path("/r/cni"), sandbox_image="localhost/pause:v"
        )
    )
    parsed = tomllib.loads(text)
    assert parsed["version"] == 2
    assert parsed["grpc"]["address"] == str(lay.containerd_socket)
    assert parsed["root"] == str(lay.containerd_root) and parsed["state"] == str(lay.containerd_state)
    cri = parsed["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # without it every sandbox fails on this machine
    assert cri["sandbox_image"] == "localhost/pause:v"
    assert cri["netns_mounts_under_state_dir"] is True  # a node's stop finds its network namespaces
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {"BinaryName": "/r/runc", "SystemdCgroup": False}
    assert cri["cni"] == {"bin_dir": "/r/cni", "conf_dir": str(lay.cni_conf_dir)}


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (False, "false"), (3, "3"), ('a"b\\c', '"a\\"b\\\\c"'), (["x", 1], '["x", 1]')],
)
def test_toml_values(value: object, text: str) -> None:
    assert toml({"k": value}) == f"k = {text}\n"
    assert tomllib.loads(toml({"k": value}))["k"] == value


def test_toml_refuses_what_it_cannot_write() -> None:
    with pytest.raises(TypeError, match="float"):
        toml({"k": 1.5})


def test_the_cni_bridge_is_the_gateway_of_the_nodes_subnet_and_never_masquerades() -> None:
    lay = layout(2)
    conf = cni_conflist(lay)
    bridge = conf["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["bridge"] == lay.bridge
    assert bridge["isGateway"] is True and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.2.0/24"}]]
    assert bridge["ipam"]["dataDir"] == str(lay.ipam_dir)
    assert conf["plugins"][1] == {"type": "loopback"}


def test_the_kubelet_is_configured_for_cgroup_v1_without_qos_cgroups_on_the_nodes_containerd() -> None:
    lay = layout(0)
    config = kubelet_config(lay, ca_file=Path("/pki/ca.crt"), port=10250, healthz_port=10248)
    assert config["kind"] == "KubeletConfiguration"
    assert config["containerRuntimeEndpoint"] == f"unix://{lay.containerd_socket}"
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    # several kubelets share one cgroup hierarchy: none claims /kubepods, none enforces allocatable
    assert config["cgroupsPerQOS"] is False and config["enforceNodeAllocatable"] == []
    assert config["failSwapOn"] is False
    assert config["readOnlyPort"] == 0 and config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["x509"]["clientCAFile"] == "/pki/ca.crt"


def test_kube_proxy_leaves_the_machines_conntrack_and_route_localnet_alone() -> None:
    config = kube_proxy_config(kubeconfig=Path("/k"), node_name="n0", healthz_port=1, metrics_port=2)
    assert config["mode"] == "iptables" and config["clusterCIDR"] == CLUSTER_CIDR
    assert config["conntrack"] == {
        "maxPerCore": 0,
        "min": 0,
        "tcpEstablishedTimeout": "0s",
        "tcpCloseWaitTimeout": "0s",
    }
    assert config["iptables"]["localhostNodePorts"] is False


BASE_FLAGS = [
    "--bind-address=127.0.0.1",
    "--advertise-address=127.0.0.1",
    "--authorization-mode=RBAC",
    "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
    "--endpoint-reconciler-type=none",
    "--secure-port=6443",
]


PKI = Pki(
    ca_cert=Path("/pki/ca.crt"),
    serving_cert=Path("/pki/serving.crt"),
    serving_key=Path("/pki/serving.key"),
    sa_key=Path("/pki/sa.key"),
    sa_pub=Path("/pki/sa.pub"),
    token_file=Path("/pki/tokens.csv"),
    admin_token="t",
    kubelet_client_cert=Path("/pki/kubelet-client.crt"),
    kubelet_client_key=Path("/pki/kubelet-client.key"),
)


def test_real_nodes_open_the_api_server_to_pods_and_turn_on_service_accounts_and_the_node_authorizer() -> (
    None
):
    flags = dict(f.split("=", 1) for f in apiserver_flags(BASE_FLAGS, host="192.0.2.2", pki=PKI))
    assert flags == {
        "--bind-address": "0.0.0.0",
        "--advertise-address": "192.0.2.2",
        "--authorization-mode": "Node,RBAC",
        "--disable-admission-plugins": "TaintNodesByCondition",
        "--endpoint-reconciler-type": "lease",
        "--secure-port": "6443",
        # logs and exec reach a kubelet at its Node's address, as kubeadm's client certificate
        "--kubelet-preferred-address-types": "InternalIP",
        "--kubelet-client-certificate": "/pki/kubelet-client.crt",
        "--kubelet-client-key": "/pki/kubelet-client.key",
    }


def test_a_flag_real_nodes_replace_that_is_missing_is_an_error_not_a_silent_default() -> None:
    with pytest.raises(ValueError, match="--endpoint-reconciler-type"):
        apiserver_flags([f for f in BASE_FLAGS if "reconciler" not in f], host="192.0.2.2", pki=PKI)


def test_the_kubelets_are_token_users_in_system_nodes_and_the_others_in_no_group() -> None:
    real = RealNodes(CLUSTER, 2)
    real.tokens = {"system:kube-proxy": "t1", "system:node:devcluster-node-0": "t2"}
    assert real.token_lines().splitlines() == [
        "t1,system:kube-proxy,uid-system-kube-proxy",
        't2,system:node:devcluster-node-0,uid-system-node-devcluster-node-0,"system:nodes"',
    ]
    assert real.names == ["devcluster-node-0", "devcluster-node-1"]
