#!/bin/sh
# The front of the kubectl stand-in (test/support/fake-kubectl.mjs, which says what each call does).
# A call it only records (wait, rollout, delete, apply -f: most of the guide's 34) is recorded here,
# the same JSON line, without a node start (some 0.3 s of CPU each); a call that renders or answers
# (apply -k, create, get), or an argument that JSON would have to escape, goes to fake-kubectl.mjs.
# FAKE_KUBECTL_NODE: the node to run it with. With FAKE_KUBECTL_STATE (a directory whose file
# `namespaces` lists those that exist, one a line), a call in a namespace not there fails, as
# kubectl's does against a cluster.
ns=
prev=
for arg in "$@"; do
  case "$prev" in -n | --namespace) ns=$arg ;; esac
  case "$arg" in --namespace=*) ns=${arg#--namespace=} ;; esac
  prev=$arg
done
if [ -n "$ns" ] && [ -n "$FAKE_KUBECTL_STATE" ] && ! grep -qxF "$ns" "$FAKE_KUBECTL_STATE/namespaces"; then
  echo "Error from server (NotFound): namespaces \"$ns\" not found (kubectl test stand-in)" >&2
  exit 1
fi
for arg in "$@"; do
  case "$arg" in
    -k | --kustomize | --kustomize=* | create | get | *[!A-Za-z0-9_./:=,@+-]*)
      exec "$FAKE_KUBECTL_NODE" "$(dirname "$0")/fake-kubectl.mjs" "$@" ;;
  esac
done
json=
for arg in "$@"; do json="$json${json:+,}\"$arg\""; done
printf '{"args":[%s],"objects":[]}\n' "$json" >>"$FAKE_KUBECTL_LOG"
