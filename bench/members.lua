-- make bench's members (bench.sh, tls_memory.py): copies of one member record that botgatectl
-- stored, written in one call instead of one botgatectl call each (scenario d needs more than
-- 5,000). KEYS[1] the template's member key, KEYS[2] its recipient key; ARGV the count, the
-- template's _id and externalId, the prefixes of the copies' _id and externalId and the
-- digits of the number after the externalId's prefix. Copy i (1 .. count-1) is
-- ARGV[4] .. i with externalId ARGV[5] .. i, zero-padded to ARGV[6] digits. A standalone
-- Redis only: the copies' keys are not declared (one per member, too many for KEYS).
local function replace(s, from, to)
    local out, i = {}, 1
    while true do
        local a, b = string.find(s, from, i, true)
        if not a then break end
        out[#out + 1] = string.sub(s, i, a - 1) .. to
        i = b + 1
    end
    out[#out + 1] = string.sub(s, i)
    return table.concat(out)
end
local mkey, rkey = KEYS[1], KEYS[2]
local n, tid, text = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local record, recipient = redis.call('GET', mkey), redis.call('GET', rkey)
if not record or not recipient then return redis.error_reply('no template member at ' .. mkey) end
local mbase = string.sub(mkey, 1, #mkey - #tid)
local rbase = string.sub(rkey, 1, #rkey - #text)
for i = 1, n - 1 do
    local id = ARGV[4] .. i
    local ext = ARGV[5] .. string.format('%0' .. ARGV[6] .. 'd', i)
    redis.call('SET', mbase .. id, replace(replace(record, '"' .. tid .. '"', '"' .. id .. '"'), text, ext))
    redis.call('SET', rbase .. ext, replace(recipient, tid, id))
end
return n
