# Sourced by the llama.cpp recording scripts: what they share about a llama-server they started.

# wait_for_server PORT PID LOG TRIES: poll PORT's /health every 0.5 s, TRIES times at most; exit 1 (naming LOG) as
# soon as the server PID has exited.
wait_for_server() {
  local port=$1 pid=$2 log=$3 tries=$4
  for _ in $(seq "$tries"); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "llama-server exited; see $log" >&2; exit 1; }
    sleep 0.5
  done
}
