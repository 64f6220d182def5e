"""Resource properties exactly as CrossGuard's analyzer hands them to a policy.

pulumi_policy's analyzer receives properties as a protobuf Struct and passes each policy
`unknown_checking_proxy(deserialize_properties(MessageToDict(struct)))`: lists become a read-only
`Sequence` that is not a `list`, dicts a `Mapping` that is not a `dict`, and every number a float.
Building props the same way lets the rules be tested against what a real `pulumi preview` gives
them, without starting the analyzer server (which constructing a PolicyPack does).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.proxy import unknown_checking_proxy

from policy.rules import Resource


def crossguard_props(props: Mapping[str, Any]) -> Mapping[str, Any]:
    struct = struct_pb2.Struct()
    struct.update(json.loads(json.dumps(props)))  # what the engine serialises: JSON-shaped values
    proxied: Mapping[str, Any] = unknown_checking_proxy(
        deserialize_properties(json_format.MessageToDict(struct))
    )
    return proxied


def crossguard(resource: Resource) -> Resource:
    return Resource(
        resource.type, resource.name, crossguard_props(resource.props), id=resource.id, urn=resource.urn
    )
