# Sourced by bench/raft-store.sh and bench/catch-up.sh: three `once store`
# members on 127.0.0.1–3, mutual TLS as deployed (STORE_TLS=off: plaintext,
# `--insecure-plaintext`), data on disk under $DIR.
# Needs $ONCE and $DIR set by the caller.
STORE_TLS="${STORE_TLS:-on}"
STORE_PEERS="1=127.0.0.1:27001,2=127.0.0.2:27001,3=127.0.0.3:27001"
STORE_ENDPOINTS="127.0.0.1:27101,127.0.0.2:27101,127.0.0.3:27101"

# A CA, a certificate per member, and an operator's for the status, admin
# and bench commands (exported as ONCE_TLS_*, which they read).
store_certs() {
  "$ONCE" certs init --dir "$DIR/ca" >/dev/null
  for i in 1 2 3; do
    "$ONCE" certs issue --ca "$DIR/ca" --region "member-$i" --role store --ip "127.0.0.$i" --out "$DIR/tls$i" >/dev/null
  done
  "$ONCE" certs issue --ca "$DIR/ca" --region bench --role operator --out "$DIR/operator" >/dev/null
}

store_operator_env() {
  [[ $STORE_TLS == off ]] && return 0
  export ONCE_TLS_CA="$DIR/operator/ca.pem" ONCE_TLS_CERT="$DIR/operator/cert.pem" ONCE_TLS_KEY="$DIR/operator/key.pem"
}

# The TLS flags of member ID (or the plaintext switch).
store_tls_flags() { # id
  if [[ $STORE_TLS == off ]]; then
    echo --insecure-plaintext
  else
    echo --tls-ca "$DIR/tls$1/ca.pem" --tls-cert "$DIR/tls$1/cert.pem" --tls-key "$DIR/tls$1/key.pem"
  fi
}

# Starts member ID in the background (data in $DIR/mID, output appended to
# $DIR/outID); its pid is in $STORE_PID.
store_start() { # id [flags…]
  local i=$1; shift
  RUST_LOG=error "$ONCE" store --id "$i" --raft-addr "127.0.0.$i:27001" --api-addr "127.0.0.$i:27101" \
    --admin-listen "127.0.0.$i:27201" \
    $(store_tls_flags "$i") \
    --data-dir "$DIR/m$i" "$@" >>"$DIR/out$i" 2>&1 &
  STORE_PID=$!
}

# Waits (with a deadline of 10 s) until some member says it is the leader.
store_wait_for_leader() {
  local _
  for _ in $(seq 1 100); do
    [[ "$("$ONCE" store status --json --endpoints "$STORE_ENDPOINTS")" == *'"state":"Leader"'* ]] && return 0
    sleep 0.1
  done
  echo "no leader" >&2
  return 1
}

# The three founding members with FLAGS, their pids appended to the caller's
# PIDS, the operator's certificate exported, once one of them leads.
store_cluster_start() { # [flags…]
  local i
  store_certs
  for i in 1 2 3; do
    store_start "$i" --peers "$STORE_PEERS" "$@"
    PIDS+=("$STORE_PID")
  done
  store_operator_env
  store_wait_for_leader
}
