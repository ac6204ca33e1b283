#!/usr/bin/env bash
# Writes everything deploy/docker-compose.yml mounts: a throwaway CA, the
# daemon's TLS certificate (SAN DNS:gpustreamd, the compose service name),
# a client certificate for mTLS, random bearer tokens, and the daemon config
# whose tenants know those tokens only by SHA-256. tools/compose-test.sh
# runs it into a temporary folder; an operator trying the compose file by
# hand runs it once into deploy/compose/secrets (gitignored).
#
#   deploy/compose/make-credentials.sh OUT
#
#   OUT/daemon/gpustreamd.textproto   tenants ops (admin), team-a, team-b
#   OUT/daemon/tls/server.{crt,key}   server certificate and key
#   OUT/daemon/tls/ca.crt             CA that client certificates must chain to
#   OUT/client/ca.crt                 what clients verify the daemon against
#   OUT/client/{ops,team-a,team-b}.token
#   OUT/client/team-b.{crt,key}       client certificate, subject CN=team-b
#   OUT/ca/ca.key                     the CA key (never mounted)
#
# Run as root, OUT/daemon and OUT/client are handed to uid/gid 10001, the
# user of the images, because the keys are not world-readable.
set -euo pipefail

if (($# != 1)); then
  echo "usage: deploy/compose/make-credentials.sh OUT" >&2
  exit 2
fi
out=$1
image_uid=10001
days=7  # Throwaway credentials: short-lived on purpose.

mkdir -p "$out/ca" "$out/daemon/tls" "$out/client"
chmod 0700 "$out/ca"
umask 027

# OpenSSL 3 (Debian 12). P-256 keys: fast to make, and every TLS stack in
# the images (gRPC C++ and Python on OpenSSL) accepts them.
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key "$out/ca/ca.key"
openssl req -x509 -new -key "$out/ca/ca.key" -days "$days" \
  -subj "/CN=gpustream compose CA" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out "$out/ca/ca.crt"

# issue KEY CRT SUBJECT EXTENSIONS
issue() {
  key "$1"
  openssl req -new -key "$1" -subj "$3" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA "$out/ca/ca.crt" -CAkey "$out/ca/ca.key" \
    -CAcreateserial -CAserial "$out/ca/ca.srl" -days "$days" \
    -extfile <(printf '%s\n' "$4") -out "$2" 2>/dev/null
  rm -f "$1.csr"
}
# The daemon is reached as "gpustreamd" on the compose network, and as
# localhost/127.0.0.1 through a published port.
issue "$out/daemon/tls/server.key" "$out/daemon/tls/server.crt" "/CN=gpustreamd" \
  "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:gpustreamd,DNS:localhost,IP:127.0.0.1"
issue "$out/client/team-b.key" "$out/client/team-b.crt" "/CN=team-b" \
  "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"

cp "$out/ca/ca.crt" "$out/daemon/tls/ca.crt"
cp "$out/ca/ca.crt" "$out/client/ca.crt"

# 256-bit random tokens; the daemon only ever sees their SHA-256.
declare -A digest
for tenant in ops team-a team-b; do
  openssl rand -hex 32 | tr -d '\n' >"$out/client/$tenant.token"
  digest[$tenant]=$(sha256sum <"$out/client/$tenant.token" | cut -d' ' -f1)
done

cat >"$out/daemon/gpustreamd.textproto" <<EOF
# gpustreamd --config for the compose deployment, written by
# deploy/compose/make-credentials.sh. Listen addresses, TLS and metrics
# are flags in deploy/docker-compose.yml. SIGHUP rereads the tenants.
limits {
  max_sessions: 64
  max_queues_per_session: 16
  default_lease_seconds: 30
  kernel_time_limit_ms: 60000
}
tenants {
  name: "ops"
  token_sha256: "${digest[ops]}"
  admin: true
}
tenants {
  name: "team-a"
  token_sha256: "${digest[team-a]}"
  weight: 2
  quota {
    device_memory_bytes: 268435456
    max_sessions: 16
    max_queues: 64
  }
}
tenants {
  name: "team-b"
  token_sha256: "${digest[team-b]}"
  tls_subject: "CN=team-b"
  quota {
    device_memory_bytes: 268435456
    max_sessions: 16
    max_queues: 64
  }
}
EOF

if [[ $(id -u) == 0 ]]; then
  chown -R "$image_uid:$image_uid" "$out/daemon" "$out/client"
fi
chmod 0750 "$out/daemon" "$out/daemon/tls" "$out/client"
if [[ $(id -u) != 0 ]]; then
  echo "make-credentials: not root: the files belong to $(id -un), so the" \
    "containers (uid $image_uid) cannot read them; run:" \
    "sudo chown -R $image_uid:$image_uid $out/daemon $out/client" >&2
fi
