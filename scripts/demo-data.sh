#!/bin/sh
# Loads the make-run demo: one channel of each implemented platform and one member each,
# pointing at the simulator given as $1.
set -eu
sim=$1
ctl="$(cd "$(dirname "$0")/.." && pwd)/build/bin/botgatectl"
now=$(date +%s)000

channel() { # id type info-json
  printf '{"_id":"%s","app":"demo","type":"%s","on":true,"name":"demo %s","info":%s,"createdAt":%s,"updatedAt":%s}' \
    "$1" "$2" "$2" "$3" "$now" "$now" | "$ctl" channel put -
}
member() { # id channel externalId platform
  printf '{"_id":"%s","channel":"%s","app":"demo","externalId":"%s","platform":"%s","firstName":"Demo","lastName":"User","locale":"en","customLocale":null,"tags":[],"meta":{},"botMeta":{"tree":null,"nodeCompositeId":null,"liveChat":false,"subscribed":true,"tempData":{}},"createdAt":%s,"updatedAt":%s}' \
    "$1" "$2" "$3" "$4" "$now" "$now" | "$ctl" member put -
}

channel demo-facebook facebook '{"accessToken":"demo-page-token","pageId":"100200300"}'
member demo-fb-member demo-facebook psid-demo-1 facebook
channel demo-whatsapp whatsapp "{\"apiPath\":\"$sim/wa\",\"adminUsername\":\"admin\",\"adminPassword\":\"demo-password\",\"waId\":\"85200000001\"}"
member demo-wa-member demo-whatsapp 85291234567 whatsapp
channel demo-whatsapp-cloud whatsapp-cloud '{"accessToken":"demo-cloud-token","phoneNumberId":"1055550001","wabaId":"2001"}'
member demo-cloud-member demo-whatsapp-cloud 85291234568 whatsapp-cloud
channel demo-slack slack '{"botAccessToken":"xoxb-demo-token","botId":"B0DEMO"}'
member demo-slack-member demo-slack D0DEMO1 slack
channel demo-wechat wechat '{"appId":"wxdemo","appsecret":"demo-app-secret","botOpenId":"gh_demo"}'
member demo-wechat-member demo-wechat openid-demo-1 wechat
channel demo-teamwork teamwork '{"apiKey":"demo-api-key","tbId":"tb-demo"}'
member demo-teamwork-member demo-teamwork user-demo-1 teamwork

# A tree for redirectMemberToNode: welcome (pre-action, templated response, post-action) then a
# redirect to followup.
"$ctl" tree import - <<'EOT'
{"_id":"demo-tree","app":"demo","name":"Demo tree","nodes":{
  "welcome":{"name":"Welcome",
    "preAction":[{"type":"set","path":"member.botMeta.tempData.referrer","value":"{{agendaMeta.from}}"}],
    "response":[{"type":"TEXT","text":"Hi {{member.firstName}}, {{agendaMeta.from}} sent you here."}],
    "responseByLocale":{"zh-HK":[{"type":"TEXT","text":"{{member.firstName}}，你好！"}]},
    "postAction":[{"type":"addTags","tags":["welcomed"]}],
    "redirect":{"tree":"demo-tree","nodeCompositeId":"followup"}},
  "followup":{"name":"Follow-up","response":[{"type":"TEXT","text":"Anything else I can do for you?"}]}}}
EOT
