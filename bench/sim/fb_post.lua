-- wrk script: Facebook Send API posts, to measure botgate-sim's own capacity.
-- wrk -t2 -c64 -d10s -s bench/sim/fb_post.lua http://127.0.0.1:PORT
wrk.method = "POST"
wrk.path = "/graph/v19.0/me/messages?access_token=PAGE"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"messaging_type":"RESPONSE","recipient":{"id":"2456789012345678"},'
    .. '"message":{"text":"hello from wrk, a message of ordinary length"}}'
