-- wrk script of make bench's scenario h: signed Messenger webhooks, precomputed.
--
--   wrk -t2 -c64 -d10s --latency -s bench/webhook.lua URL -- PATH FILES
--
-- POSTs to PATH (/webhooks/<channelId>) the lines of FILES.<thread> in turn, each
-- "<X-Hub-Signature-256>\t<body>" as bench/webhooks.py wrote them (wrk's Lua has no HMAC, so
-- the signing is done before the run, not by the load generator). A thread that reaches the
-- end of its file starts it again and counts a wrap: from then on botgate takes its webhooks
-- as a platform's retries (same message ids), which done() reports as "wraps".
-- bench.lua's pacing (BENCH_DELAY_MS), BENCH_COUNT and its BENCH_JSON line are used as they are.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "bench.lua")

local threads_seen = {}
local base_setup = setup
function setup(thread)
    base_setup(thread)
    threads_seen[#threads_seen + 1] = thread
end

wraps = 0
local file
function init(args)
    local path, files = args[1], args[2]
    if not path or not files then
        error("webhook.lua: wants PATH and FILES after --")
    end
    file = assert(io.open(files .. "." .. (tid or 0), "r"))
    wrk.method = "POST"
    wrk.path = path
end

function request()
    local line = file:read("*l")
    if not line then
        wraps = wraps + 1
        file:seek("set")
        line = file:read("*l")
    end
    local tab = line:find("\t", 1, true)
    return wrk.format("POST", nil, {["Content-Type"] = "application/json",
        ["X-Hub-Signature-256"] = line:sub(1, tab - 1)}, line:sub(tab + 1))
end

function bench_extra()
    local n = 0
    for _, t in ipairs(threads_seen) do
        n = n + (tonumber(t:get("wraps")) or 0)
    end
    return ',"wraps":' .. n
end
