"""An AWS fleet's inventory and the aws-unhealthy action, end to end against moto's EC2 and Auto Scaling.

moto's server on localhost stands in for both APIs: an Auto Scaling group of three instances is
made the way stacks/aws_compute.py makes it (tags propagated at launch, so each instance carries
aws:autoscaling:groupName, which the outputs' node_filter names). Then the real commands run:
`fleetforge inventory --stack-outputs` writes the amazon.aws.aws_ec2 configuration, the real
`ansible-inventory` lists the group through it, and `fleetforge gate --act aws-unhealthy`, given that
configuration as its `--hosts-inventory`, marks the rejected node Unhealthy through boto3. Credentials are fake and every endpoint is moto's, so no
call can reach AWS.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BIN
from tests.validation.gate import helpers
from validation.actions.hostvars import hostvars_from_inventory_list

REGION = "us-east-1"
GROUP = "train-a-nodes"
NODE_TAGS = {"fleet": "train-a", "owner": "ml-platform", "Name": "train-a-node"}


def _moto_server() -> Any:
    """moto's threaded server class, or a skip (a failure under CI) naming the install line."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        message = "moto is not installed: pip install 'fleetforge[dev]'  (moto[server,ec2,autoscaling])"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return ThreadedMotoServer


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = _moto_server()(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cloud_env(endpoint: str) -> dict[str, str]:
    """The environment every command runs in: fake credentials, every AWS endpoint moto's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_SESSION_TOKEN="testing",
        AWS_DEFAULT_REGION=REGION,
        AWS_ENDPOINT_URL=endpoint,
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def _client(service: str, env: dict[str, str]) -> Any:
    import boto3

    return boto3.session.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=env["AWS_SESSION_TOKEN"],
        region_name=REGION,
    ).client(service, endpoint_url=env["AWS_ENDPOINT_URL"])


@pytest.fixture(scope="module")
def group(cloud_env: dict[str, str]) -> list[str]:
    """The fleet's Auto Scaling group of three running instances; their ids, sorted."""
    ec2 = _client("ec2", cloud_env)
    autoscaling = _client("autoscaling", cloud_env)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone=f"{REGION}a")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    template = ec2.create_launch_template(
        LaunchTemplateName="train-a-lt",
        LaunchTemplateData={
            "ImageId": image,
            "InstanceType": "p5.48xlarge",
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in NODE_TAGS.items()]}
            ],
        },
    )["LaunchTemplate"]["LaunchTemplateId"]
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=GROUP,
        LaunchTemplate={"LaunchTemplateId": template, "Version": "$Latest"},
        MinSize=3,
        MaxSize=4,
        DesiredCapacity=3,
        VPCZoneIdentifier=subnet["Subnet"]["SubnetId"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in NODE_TAGS.items()],
    )
    # An instance outside the group, tagged like the fleet: the node_filter must leave it out.
    ec2.run_instances(
        ImageId=image,
        InstanceType="p5.48xlarge",
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet["Subnet"]["SubnetId"],
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in NODE_TAGS.items()]}
        ],
    )
    instances = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[GROUP])["AutoScalingGroups"][
        0
    ]
    ids = sorted(i["InstanceId"] for i in instances["Instances"])
    assert len(ids) == 3
    return ids


def stack_outputs() -> dict[str, Any]:
    """The outputs stacks/aws.py exports for a p5.48xlarge fleet, with moto's group and region."""
    return {
        "fleet": {"name": "train-a", "cloud": "aws", "sku": "p5.48xlarge", "region": REGION, "nodes": 3},
        "group": {
            "kind": "aws-autoscaling-group",
            "name": GROUP,
            "region": REGION,
            "node_filter": {"tag:aws:autoscaling:groupName": GROUP},
        },
        "fabric": {"kind": "efa", "nics": 32},
        "storage": None,
        "checkpoints": None,
        "tags": {"owner": "ml-platform", "fleet": "train-a"},
    }


def command(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def config(
    group: list[str], endpoint: str, cloud_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The amazon.aws.aws_ec2 configuration `fleetforge inventory` writes, pointed at moto."""
    folder = tmp_path_factory.mktemp("inventory")
    outputs = folder / "outputs.json"
    outputs.write_text(json.dumps(stack_outputs()), encoding="utf-8")
    path = folder / "train-a.aws_ec2.yml"
    done = command(
        [str(BIN / "fleetforge"), "inventory", "--stack-outputs", str(outputs), "-o", str(path)], cloud_env
    )
    assert done.returncode == 0, done.stderr
    # A test-only override: the product's configuration talks to AWS's own endpoints.
    path.write_text(path.read_text(encoding="utf-8") + f"endpoint_url: {endpoint}\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def listing(config: Path, cloud_env: dict[str, str]) -> dict[str, Any]:
    """`ansible-inventory --list` of that configuration."""
    listed = command([str(BIN / "ansible-inventory"), "-i", str(config), "--list"], cloud_env)
    assert listed.returncode == 0, listed.stderr
    data: dict[str, Any] = json.loads(listed.stdout)
    return data


def test_the_inventory_lists_the_groups_instances_with_the_ids_the_action_reads(
    listing: dict[str, Any], group: list[str]
) -> None:
    hostvars = hostvars_from_inventory_list(listing)
    assert sorted(v["ec2_instance_id"] for v in hostvars.values()) == group  # not the stray instance
    for host, v in hostvars.items():
        assert host == v["private_ip_address"] == v["ansible_host"]  # reached and named by private IP
        assert v["aws_region"] == REGION
        assert v["fleetforge_fleet"] == "train-a"
        assert v["gpu_facts_expected_nvidia_gpus"] == 8
    assert sorted(listing["gpu_nodes"]["hosts"]) == sorted(hostvars)
    for empty in ("ib_nodes", "lustre_clients", "beegfs_clients", "nvmeof_clients"):
        assert not listing.get(empty, {}).get("hosts")


def _health(env: dict[str, str], ids: list[str]) -> dict[str, str]:
    found = _client("autoscaling", env).describe_auto_scaling_instances(InstanceIds=ids)
    return {i["InstanceId"]: i["HealthStatus"] for i in found["AutoScalingInstances"]}


def test_the_gate_marks_exactly_the_rejected_instance_unhealthy_in_its_group(
    listing: dict[str, Any], config: Path, group: list[str], cloud_env: dict[str, str], tmp_path: Path
) -> None:
    hostvars = hostvars_from_inventory_list(listing)
    hosts = sorted(hostvars)
    slow = hosts[1]
    results = helpers.write(
        tmp_path / "results",
        {
            host: helpers.node_records(host, scale={"gemm_bf16_tflops": 0.5} if host == slow else None)
            for host in hosts
        },
    )
    gate = [str(BIN / "fleetforge"), "gate", str(results), "--act", "aws-unhealthy"]
    # The plugin's configuration itself: the gate lists the group through ansible-inventory.
    gate += ["--hosts-inventory", str(config)]

    planned = command([*gate, "--dry-run"], cloud_env)
    assert planned.returncode == 1, planned.stdout + planned.stderr  # a node rejected, nothing done
    assert hostvars[slow]["ec2_instance_id"] in planned.stdout
    assert set(_health(cloud_env, group).values()) == {"Healthy"}

    acted = command(gate, cloud_env)
    assert acted.returncode == 1, acted.stdout + acted.stderr
    unhealthy = hostvars[slow]["ec2_instance_id"]
    assert _health(cloud_env, group) == {i: "Unhealthy" if i == unhealthy else "Healthy" for i in group}
