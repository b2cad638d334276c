-- wrk script of bench scenario f (bench/scenario_f.py): POST /sendResponses of one TEXT to a
-- whatsapp-cloud number, each request to the next of BENCH_MEMBERS recipients (made by the
-- first request that names them), its text unique ("<PREFIX>-<n>": the simulator's record
-- tells lost and duplicated messages).
--
--   wrk -t1 -c16 -s bench/scenario_f.lua URL -- MODE TOKEN CHANNEL PREFIX
--
-- MODE async: with Prefer: respond-async (answered 202 once queued); sync: without.
-- BENCH_COUNT in the environment: the thread stops after that many answers.
-- done() prints one line "BENCH_JSON {...}" as bench/bench.lua does.

local MEMBERS = tonumber(os.getenv("BENCH_MEMBERS") or "") or 1000
local COUNT = tonumber(os.getenv("BENCH_COUNT") or "") or 0
local channel, prefix
local n, answered = 0, 0

function init(args)
    local mode, token = args[1], args[2]
    channel, prefix = args[3], args[4]
    wrk.method = "POST"
    wrk.path = "/sendResponses"
    wrk.headers["Content-Type"] = "application/json"
    wrk.headers["Authorization"] = "Bearer " .. token
    if mode == "async" then
        wrk.headers["Prefer"] = "respond-async"
    elseif mode ~= "sync" then
        error("scenario_f.lua: MODE must be async or sync, got " .. tostring(mode))
    end
end

function request()
    local body = string.format(
        '{"channelId":"%s","recipientId":"%d","response":[{"type":"TEXT","text":"%s-%d"}]}',
        channel, 15550000000 + n % MEMBERS, prefix, n)
    n = n + 1
    return wrk.format(nil, nil, nil, body)
end

function response(status)
    answered = answered + 1
    if COUNT > 0 and answered >= COUNT then
        wrk.thread:stop()
    end
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        'BENCH_JSON {"requests":%d,"duration_us":%d,"status":%d,"timeout":%d,"connect":%d,'
            .. '"read":%d,"write":%d,"p50_us":%d,"p99_us":%d,"max_us":%d}\n',
        summary.requests, summary.duration, e.status, e.timeout, e.connect, e.read, e.write,
        latency:percentile(50), latency:percentile(99), latency.max))
end
