# shellcheck shell=bash
# Sourced by the GitLab deploy job: turns the job's OIDC ID token into the environment each cloud's
# SDKs read (Pulumi's providers, boto3, google-auth, azure-identity), for FLEETFORGE_CLOUD.
# No stored cloud secret: the token is minted per job by `id_tokens:` and trusted by the cloud's
# workload identity federation, which should pin the project path and the protected branch.
set -euo pipefail

token_dir=$(mktemp -d)
chmod 700 "$token_dir"
# The tokens go when the job's shell exits: a shell executor's /tmp outlives the job.
trap 'rm -rf "$token_dir"' EXIT

case "${FLEETFORGE_CLOUD:?set FLEETFORGE_CLOUD to aws, gcp or azure}" in
  aws)
    printf '%s' "${AWS_ID_TOKEN:?id_tokens: AWS_ID_TOKEN missing}" >"$token_dir/aws"
    export AWS_WEB_IDENTITY_TOKEN_FILE="$token_dir/aws"
    export AWS_ROLE_ARN="${AWS_ROLE_ARN:?set AWS_ROLE_ARN: the role the GitLab OIDC provider may assume}"
    export AWS_ROLE_SESSION_NAME="fleetforge-${CI_PROJECT_ID:-0}-${CI_PIPELINE_ID:-0}"
    export AWS_REGION="${AWS_REGION:?set AWS_REGION}"
    ;;
  gcp)
    printf '%s' "${GCP_ID_TOKEN:?id_tokens: GCP_ID_TOKEN missing}" >"$token_dir/gcp"
    : "${GCP_WORKLOAD_IDENTITY_PROVIDER:?set GCP_WORKLOAD_IDENTITY_PROVIDER: projects/NUM/locations/global/workloadIdentityPools/POOL/providers/PROVIDER}"
    # An external_account credential file: google-auth exchanges the token at STS on every refresh.
    impersonate=""
    if [ -n "${GCP_SERVICE_ACCOUNT:-}" ]; then
      impersonate=",\"service_account_impersonation_url\":\"https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/${GCP_SERVICE_ACCOUNT}:generateAccessToken\""
    fi
    printf '{"type":"external_account","audience":"//iam.googleapis.com/%s","subject_token_type":"urn:ietf:params:oauth:token-type:jwt","token_url":"https://sts.googleapis.com/v1/token","credential_source":{"file":"%s"}%s}\n' \
      "$GCP_WORKLOAD_IDENTITY_PROVIDER" "$token_dir/gcp" "$impersonate" >"$token_dir/gcp.json"
    export GOOGLE_APPLICATION_CREDENTIALS="$token_dir/gcp.json"
    export CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE="$token_dir/gcp.json"
    ;;
  azure)
    printf '%s' "${AZURE_ID_TOKEN:?id_tokens: AZURE_ID_TOKEN missing}" >"$token_dir/azure"
    : "${AZURE_CLIENT_ID:?set AZURE_CLIENT_ID}" "${AZURE_TENANT_ID:?set AZURE_TENANT_ID}"
    : "${AZURE_SUBSCRIPTION_ID:?set AZURE_SUBSCRIPTION_ID}"
    # azure-identity (the gate's actions) reads the token file; Pulumi's azure-native provider the ARM_* names.
    export AZURE_FEDERATED_TOKEN_FILE="$token_dir/azure" AZURE_CLIENT_ID AZURE_TENANT_ID AZURE_SUBSCRIPTION_ID
    export ARM_USE_OIDC=true ARM_OIDC_TOKEN="$AZURE_ID_TOKEN" ARM_CLIENT_ID="$AZURE_CLIENT_ID"
    export ARM_TENANT_ID="$AZURE_TENANT_ID" ARM_SUBSCRIPTION_ID="$AZURE_SUBSCRIPTION_ID"
    ;;
  *)
    echo "FLEETFORGE_CLOUD=$FLEETFORGE_CLOUD: want aws, gcp or azure" >&2
    exit 64
    ;;
esac
