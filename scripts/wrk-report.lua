-- wrk's results as one JSON line (latencies in microseconds), for scripts/bench-server.py:
-- done() runs once after the run, so it costs nothing per request.
done = function(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    '{"wrk":1,"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,' ..
    '"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    errors.connect, errors.read, errors.write, errors.status, errors.timeout))
end
