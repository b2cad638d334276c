-- wrk script of make bench: one script for every scenario and every target.
--
--   wrk -t2 -c64 -d10s --latency -s bench/bench.lua URL -- MODE SCENARIO [TOKEN]
--
-- MODE botgate:  the gateway's own API (POST /sendResponses or /redirectMemberToNode, bearer
--                token), the request a bot sends;
-- MODE upstream: the Facebook Send API call that botgate makes for it
--                (POST /graph/v19.0/me/messages?access_token=...), sent to nginx (which proxies
--                it to the simulator) or to the simulator itself.
-- SCENARIO: a (1 TEXT), b (3 TEXT in one request), c (redirect to a 2-response node), c-lua
--           (redirect to a node whose Lua transform returns the same 2 responses),
--           a-tls and a-tls-h1 (as a; the upstream is reached over TLS), d (as a; run with 5000
--           connections while the simulator answers after 1 s), a-off and d-off (a and d, sent
--           to a botgate with per-member order off: their twins), a-key (as a, with a new
--           Idempotency-Key on every request), e (1 TEXT to a whatsapp-cloud number limited to
--           1,000/s, through three instances: bench/scenario_e.py).
-- MODE botgate sends each request to another member, bench-m0, bench-m1, ... (BENCH_MEMBERS of
-- them; 1: every request to bench-member): each wrk thread cycles through its own share, so
-- that with per-member order on (the product's default) a member's previous request has
-- answered before its next one comes, and no request waits for its turn.
-- BENCH_THREADS in the environment: wrk's thread count (how the members are shared out).
-- BENCH_DELAY_MS in the environment: after each answer, wait a random 0..2*BENCH_DELAY_MS ms
-- before the next request on the connection: a paced load for the added-latency figure (wrk
-- has no fixed rate like wrk2); the randomness keeps the connections from firing in step.
--
-- BENCH_COUNT in the environment: each wrk thread stops after that many answers (a fixed
-- number of requests for the strace phase; wrk's -d is then only a cap).
--
-- done() prints one line "BENCH_JSON {...}" that bench/report.py reads; a script that loads
-- this one (bench/webhook.lua) adds its own fields there with a global bench_extra().

local CHANNEL = "bench-fb"
local MEMBER = "bench-member"
local PSID = "2456789012345678"
local TEXT = "hello from wrk, a message of ordinary length"

local MEMBERS = tonumber(os.getenv("BENCH_MEMBERS") or "") or 1
local THREADS = tonumber(os.getenv("BENCH_THREADS") or "") or 1

-- setup() runs in wrk's main Lua state: it gives each thread its number (the global tid) and
-- the run's nonce (the global nonce), so that every run's Idempotency-Keys are new
local threads = 0
local run_nonce = string.format("%x%x", os.time(), math.random(0, 0xffffff))
function setup(thread)
    thread:set("tid", threads)
    thread:set("nonce", run_nonce)
    threads = threads + 1
end

local function text_responses(n)
    local parts = {}
    for i = 1, n do
        parts[i] = '{"type":"TEXT","text":"' .. TEXT .. ' ' .. i .. '"}'
    end
    return '[' .. table.concat(parts, ',') .. ']'
end

function init(args)
    local mode, scenario, token = args[1], args[2], args[3]
    scenario = scenario:gsub("%-off$", "") -- a twin sends what its scenario sends
    wrk.method = "POST"
    wrk.headers["Content-Type"] = "application/json"
    if mode == "botgate" then
        wrk.headers["Authorization"] = "Bearer " .. (token or "")
        if scenario == "e" then
            -- a whatsapp-cloud number under a shared 1,000/s limit (bench/scenario_e.py)
            wrk.path = "/sendResponses"
            wrk.body = '{"channelId":"bench-wc","recipientId":"' .. PSID .. '",'
                .. '"response":' .. text_responses(1) .. '}'
        elseif scenario == "c" then
            wrk.path = "/redirectMemberToNode"
            wrk.body = '{"channelId":"' .. CHANNEL .. '","memberId":"' .. MEMBER .. '",'
                .. '"redirect":{"tree":"bench-tree","nodeCompositeId":"two"}}'
        elseif scenario == "c-lua" then
            wrk.path = "/redirectMemberToNode"
            wrk.body = '{"channelId":"' .. CHANNEL .. '","memberId":"' .. MEMBER .. '",'
                .. '"redirect":{"tree":"bench-tree","nodeCompositeId":"lua"},'
                .. '"meta":{"status":"shipped"}}'
        else
            wrk.path = "/sendResponses"
            wrk.body = '{"channelId":"' .. CHANNEL .. '","memberId":"' .. MEMBER .. '",'
                .. '"response":' .. text_responses(scenario == "b" and 3 or 1) .. '}'
        end
        local keyed = scenario == "a-key"
        local spread = scenario ~= "e" and MEMBERS > 1
        local pre, post = wrk.body:match('^(.-"memberId":")' .. MEMBER:gsub("%-", "%%-") .. '(".*)$')
        local share = math.max(1, math.floor(MEMBERS / THREADS))
        local first, n = (tid or 0) * share, 0
        if keyed or (spread and pre) then
            function request()
                n = n + 1
                if keyed then
                    wrk.headers["Idempotency-Key"] = "bench-" .. nonce .. "-" .. tid .. "-" .. n
                end
                if spread and pre then
                    return wrk.format(nil, nil, nil, pre .. "bench-m" .. (first + n % share) .. post)
                end
                return wrk.format()
            end
        end
    elseif mode == "upstream" then
        -- the body botgate's facebook adapter sends for one TEXT response
        wrk.path = "/graph/v19.0/me/messages?access_token=bench-page-token"
        wrk.body = '{"messaging_type":"RESPONSE","recipient":{"id":"' .. PSID .. '"},'
            .. '"message":{"text":"' .. TEXT .. ' 1"}}'
    else
        error("bench.lua: MODE must be botgate or upstream, got " .. tostring(mode))
    end
end

local pace = tonumber(os.getenv("BENCH_DELAY_MS") or "") or 0
if pace > 0 then
    -- a different sequence in every thread's Lua state
    math.randomseed(tonumber(tostring({}):match("0x(%x+)") or "1", 16) % 2147483647)
    function delay()
        return math.random(0, 2 * pace)
    end
end

local count = tonumber(os.getenv("BENCH_COUNT") or "") or 0
if count > 0 then
    local answered = 0
    function response()
        answered = answered + 1
        if answered == count then
            wrk.thread:stop()
        end
    end
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,'
            .. '"write":%d,"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,'
            .. '"p999_us":%d,"max_us":%d,"mean_us":%.1f%s}\n',
        summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
        e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
        latency:percentile(99.9), latency.max, latency.mean, bench_extra and bench_extra() or ""))
end
