#!/bin/sh
# Runs the quickstart job: run.sh MLFSD_BINARY DEMO_DIR
# The layout goes to DEMO_DIR/ml; the output channels are mounted from
# DEMO_DIR/outputs/<channel>/ (a nas:// directory), where they stay.
set -eu
mlfsd=${1:?usage: run.sh MLFSD_BINARY DEMO_DIR}
demo=${2:?usage: run.sh MLFSD_BINARY DEMO_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$demo"
demo=$(cd "$demo" && pwd)
"$mlfsd" run --spec "$here/job.yaml" --root "$demo/ml" --output-path "nas://$demo/outputs/"
echo "model:       $(cat "$demo/outputs/model/model.json")"
echo "checkpoints: $(ls "$demo/outputs/checkpoints" | tr '\n' ' ')"
