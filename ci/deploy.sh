#!/usr/bin/env bash
# ci/deploy.sh SPEC OUTPUTS.json: put the spec into the Pulumi stack's config, preview and apply it
# with the policy pack, and write the stack outputs for `fleetforge bringup`.
#
# Credentials come from the pipeline's OIDC login (the cloud SDKs' environment); the state backend
# is a bucket or container in the same cloud (PULUMI_BACKEND_URL s3://, gs:// or azblob://) and
# stack secrets use the cloud's KMS (PULUMI_SECRETS_PROVIDER awskms://, gcpkms://,
# azurekeyvault://), so no stored token or passphrase is needed.
set -euo pipefail

spec=${1:?usage: ci/deploy.sh SPEC OUTPUTS.json}
outputs=${2:?usage: ci/deploy.sh SPEC OUTPUTS.json}
python=${PYTHON:-.venv/bin/python}
: "${PULUMI_BACKEND_URL:?set PULUMI_BACKEND_URL: the state bucket (s3://, gs:// or azblob://)}"
: "${PULUMI_STACK:?set PULUMI_STACK: the stack to deploy, e.g. prod-p5}"

pulumi login "$PULUMI_BACKEND_URL"
create=(--create)
if [ -n "${PULUMI_SECRETS_PROVIDER:-}" ]; then
  create+=(--secrets-provider "$PULUMI_SECRETS_PROVIDER")
fi
pulumi stack select "${create[@]}" "$PULUMI_STACK"

# The whole spec as one JSON value: the stack reads it with get_object("fleet").
fleet_json=$("$python" -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1], encoding="utf-8"))))' "$spec")
pulumi config set fleetforge:fleet "$fleet_json"

pulumi preview --non-interactive --diff --policy-pack policy
pulumi up --non-interactive --yes --policy-pack policy
pulumi stack output --json >"$outputs"
