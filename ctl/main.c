/* main.c - botgatectl's command line: the options (getopt_long, before or after the command),
 * the table of commands, and every help text. The commands are in tokens.c and records.c. */
#include "ctl.h"

#include <botgate_version.h> /* generated in the build tree */

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ctl_die(const char *fmt, ...)
{
    va_list ap;

    fputs("botgatectl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CTL_FAIL;
}

static const char usage_text[] =
    "usage: botgatectl [OPTION...] COMMAND [ARG...] [OPTION...]\n\n"
    "  token create --app A --scope S [--scope S2] [--label L] [--expires-in D] [--channel C]\n"
    "  token revoke TOKEN | --hash SHA256_HEX\n"
    "  token list [--app A]         every token: hash, app, label, scopes, expiry\n"
    "  token get LABEL | --hash H   a token's record, found by label (never by the token)\n"
    "  token delete LABEL | --hash H\n"
    "  channel put FILE.json        validate a channel record and store it (- reads stdin)\n"
    "  channel list [--app A]\n"
    "  channel get CHANNEL_ID       the record, every secret masked\n"
    "  channel delete CHANNEL_ID    the channel record (its members stay)\n"
    "  member put FILE.json         validate a member record, store it and its recipient key\n"
    "  member list [CHANNEL_ID]     the members of a channel, or of every channel\n"
    "  member get CHANNEL_ID MEMBER_ID\n"
    "  member delete CHANNEL_ID MEMBER_ID   the member and its recipient key\n"
    "  member reindex --channel C   rebuild the channel's tag index from its members\n"
    "  broadcast create --channel C (--member ID... | --recipient ID... | --tag T...) FILE.json\n"
    "  broadcast status ID [--watch]   counts; --watch: a progress bar until it ends\n"
    "  broadcast cancel ID          stop what is not sent\n"
    "  tree import FILE.json        validate a tree and replace it atomically\n"
    "  tree list [--app A]\n"
    "  tree get TREE_ID\n"
    "  tree delete TREE_ID\n"
    "  get KIND ID...               channel ID | member CHANNEL_ID ID | token HASH | tree ID\n"
    "  app secret rotate --app A    a new signing secret for A's status callbacks and events\n"
    "  subscription add --app A --url U [--events INBOUND,READ] [--channel C]\n"
    "  subscription list --app A    where A's webhook events go\n"
    "  subscription delete ID --app A\n"
    "  help [COMMAND]               this text, or a command's (as COMMAND --help)\n\n"

    "Options (before or after the command; --name=value or --name value):\n"
    "  -j, --json           get and list: JSON for scripts (list: an array)\n"
    "  -u, --redis-url URL  the Redis (default: BOTGATE_REDIS_URL, else\n"
    "                       redis://127.0.0.1:6379/0)\n"
    "  -h, --help           help, on every command\n"
    "  -V, --version        print the version\n"
    "Key prefix BOTGATE_REDIS_PREFIX (default botgate:); a Redis Cluster: BOTGATE_REDIS_CLUSTER.\n"
    "Exit status: 0 done, 1 failed (the reason on stderr), 2 command line not understood.\n";

static const char token_help[] =
    "usage: botgatectl token create --app APP --scope SCOPE [--scope SCOPE ...]\n"
    "                              [--label LABEL] [--expires-in 30d|12h|90m|3600s]\n"
    "                              [--channel CHANNEL_ID ...]\n"
    "       botgatectl token revoke TOKEN | --hash SHA256_HEX\n"
    "       botgatectl token list [--app APP] [--json]\n"
    "       botgatectl token get LABEL | --hash SHA256_HEX [--app APP] [--json]\n"
    "       botgatectl token delete LABEL | --hash SHA256_HEX [--app APP]\n\n"
    "  -a, --app APP          create: the token's app; list, get, delete: only that app's\n"
    "  -s, --scope SCOPE      bot:sendResponses, bot:redirectMemberToNode, bot:broadcast,\n"
    "                         bot:admin, api:admin\n"
    "  -l, --label LABEL      a name to find the token by later\n"
    "  -e, --expires-in D     30d, 12h, 90m or 3600s; without it the token never expires\n"
    "  -c, --channel ID       limits the token to that channel of its app (repeatable)\n"
    "  -H, --hash SHA256_HEX  the token by its hash (list shows it)\n"
    "  -j, --json, -u, --redis-url URL, -h, --help: see botgatectl --help\n\n"
    "create prints the new token once on stdout; only its SHA-256 is stored, so botgatectl\n"
    "never shows a token again: list, get and delete find tokens by label or hash. get and\n"
    "delete refuse a label that several tokens share (narrow it with --app, or use --hash).\n"
    "revoke and delete stop the token on every botgate at once.\n";

static const char channel_help[] =
    "usage: botgatectl channel put FILE.json\n"
    "       botgatectl channel list [--app APP] [--json]\n"
    "       botgatectl channel get CHANNEL_ID [--json]\n"
    "       botgatectl channel delete CHANNEL_ID\n\n"
    "put validates the record in FILE.json (- reads stdin) and stores it: _id, app, type\n"
    "(a type botgate knows: facebook, whatsapp, whatsapp-cloud, slack, wechat, teamwork),\n"
    "info (an object), on (a boolean) and rateLimit are checked as botgate reads them; see\n"
    "docs/operations.md for the fields. get and list show every secret as \"****\".\n"
    "delete removes the channel record only: its members stay (member delete).\n"
    "  -a, --app APP  list: only that app's channels\n"
    "  -j, --json, -u, --redis-url URL, -h, --help: see botgatectl --help\n";

static const char member_help[] =
    "usage: botgatectl member put FILE.json\n"
    "       botgatectl member list [CHANNEL_ID] [--json]\n"
    "       botgatectl member get CHANNEL_ID MEMBER_ID [--json]\n"
    "       botgatectl member delete CHANNEL_ID MEMBER_ID\n"
    "       botgatectl member reindex --channel CHANNEL_ID\n\n"
    "put validates the member record in FILE.json (- reads stdin) and stores it with its\n"
    "recipient key: _id and channel are required, the channel must exist and the member's\n"
    "app must be the channel's (an absent app or platform is taken from the channel); the\n"
    "fields botgate fills in for a member it creates (botMeta, tags, meta, locale, ...) are\n"
    "filled in the same way when absent, and botMeta's fields must have their types.\n"
    "delete removes the member and the recipient key that leads to it.\n"
    "put and delete keep the tag index (a set per channel and tag, read by broadcasts to\n"
    "tags); reindex rebuilds a channel's index from its member records, after other writers.\n"
    "  -j, --json, -u, --redis-url URL, -h, --help: see botgatectl --help\n";

static const char tree_help[] =
    "usage: botgatectl tree import FILE.json\n"
    "       botgatectl tree list [--app APP] [--json]\n"
    "       botgatectl tree get TREE_ID [--json]\n"
    "       botgatectl tree delete TREE_ID\n\n"
    "import validates the tree and all its nodes (- reads stdin), then replaces the stored\n"
    "tree atomically. list shows each tree's id, app, name and number of nodes.\n"
    "  -a, --app APP  list: only that app's trees\n"
    "  -j, --json, -u, --redis-url URL, -h, --help: see botgatectl --help\n";

static const char app_help[] =
    "usage: botgatectl app secret rotate --app APP\n\n"
    "Makes a new signing secret for the app's status callbacks and webhook events\n"
    "(Botgate-Signature: HMAC-SHA256 of \"<t>.<body>\" with it), stores it in place of the old\n"
    "one and prints it once. Posts signed from then on use it; an app without one gets them\n"
    "unsigned.\n"
    "  -a, --app APP  the app\n"
    "  -u, --redis-url URL, -h, --help: see botgatectl --help\n";

static const char broadcast_help[] =
    "usage: botgatectl broadcast create --channel CHANNEL_ID (--member ID ... | --recipient ID "
    "...\n"
    "                                   | --tag TAG ...) FILE.json [--json]\n"
    "       botgatectl broadcast status BROADCAST_ID [--watch] [--json]\n"
    "       botgatectl broadcast cancel BROADCAST_ID [--json]\n\n"
    "create sends the responses of FILE.json ({\"response\":[...]}; - reads stdin)\n"
    "to members of the channel (by id, by recipient id: members created as a send creates them,\n"
    "or every member with one of the tags), checked as POST /broadcasts checks them, and prints\n"
    "the broadcast's id; the running botgate instances deliver it. status prints its counts;\n"
    "--watch follows it to the end: a progress bar with the send rate, the counts and the time\n"
    "left on a terminal, a line a second otherwise. cancel stops what is not sent and returns\n"
    "once no message of it may still go out.\n"
    "  -m, --member ID, -r, --recipient ID, -t, --tag TAG   the recipients (repeatable)\n"
    "  -w, --watch            status: follow it until it ends\n";
static const char subscription_help[] =
    "usage: botgatectl subscription add --app APP --url URL [--events TYPE,...] [--channel ID]\n"
    "       botgatectl subscription list --app APP [--json]\n"
    "       botgatectl subscription delete SUBSCRIPTION_ID --app APP\n\n"
    "The events of the platforms' webhooks (docs/webhooks.md) of APP's channels are POSTed to\n"
    "every subscription of APP that matches, signed with the app's secret (app secret rotate).\n"
    "add prints the new subscription's id; an app has at most 20.\n"
    "  -a, --app APP        the app\n"
    "  -U, --url URL        where the events are POSTed (http:// or https://)\n"
    "  -E, --events LIST    only these event types: INBOUND, POSTBACK, DELIVERED, READ, FAILED\n"
    "                       (comma-separated; default: all)\n"
    "  -c, --channel ID     only the events of this channel (default: every channel of APP)\n"
    "  -j, --json, -u, --redis-url URL, -h, --help: see botgatectl --help\n";

static const char get_help[] =
    "usage: botgatectl get channel CHANNEL_ID\n"
    "       botgatectl get member CHANNEL_ID MEMBER_ID\n"
    "       botgatectl get token SHA256_HEX\n"
    "       botgatectl get tree TREE_ID\n\n"
    "Prints the record as JSON (--json: on one line); every secret in it is shown as \"****\".\n"
    "The same as channel get, member get, token get --hash and tree get.\n";

/* One command: its words, what it runs, the options it takes (short letters; -u and -h go
 * everywhere) and how many operands. */
typedef struct ctl_cmd {
    const char *group, *verb;
    int (*run)(const ctl_opts_t *o);
    const char *opts;
    int min_args, max_args;
    const char *operands; /* for the message when their number is wrong */
} ctl_cmd_t;

static const ctl_cmd_t commands[] = {
    {"token", "create", ctl_token_create, "aslec", 0, 0, "no operand"},
    {"token", "revoke", ctl_token_revoke, "H", 0, 1, "TOKEN or --hash SHA256_HEX"},
    {"token", "list", ctl_token_list, "aj", 0, 0, "no operand"},
    {"token", "get", ctl_token_get, "aHj", 0, 1, "LABEL or --hash SHA256_HEX"},
    {"token", "delete", ctl_token_delete, "aH", 0, 1, "LABEL or --hash SHA256_HEX"},
    {"channel", "put", ctl_channel_put, "", 1, 1, "FILE.json"},
    {"channel", "list", ctl_channel_list, "aj", 0, 0, "no operand"},
    {"channel", "get", ctl_channel_get, "j", 1, 1, "CHANNEL_ID"},
    {"channel", "delete", ctl_channel_delete, "", 1, 1, "CHANNEL_ID"},
    {"member", "put", ctl_member_put, "", 1, 1, "FILE.json"},
    {"member", "list", ctl_member_list, "j", 0, 1, "at most CHANNEL_ID"},
    {"member", "get", ctl_member_get, "j", 2, 2, "CHANNEL_ID MEMBER_ID"},
    {"member", "delete", ctl_member_delete, "", 2, 2, "CHANNEL_ID MEMBER_ID"},
    {"member", "reindex", ctl_member_reindex, "c", 0, 0, "no operand (--channel CHANNEL_ID)"},
    {"tree", "import", ctl_tree_import, "", 1, 1, "FILE.json"},
    {"tree", "list", ctl_tree_list, "aj", 0, 0, "no operand"},
    {"tree", "get", ctl_tree_get, "j", 1, 1, "TREE_ID"},
    {"tree", "delete", ctl_tree_delete, "", 1, 1, "TREE_ID"},
    {"get", NULL, ctl_get, "j", 2, 3, "KIND and its ids"},
    {"app", "secret", ctl_app_secret, "a", 1, 1, "rotate"},
    {"broadcast", "create", ctl_broadcast_create, "cmrtj", 1, 1, "FILE.json"},
    {"broadcast", "status", ctl_broadcast_status, "wj", 1, 1, "BROADCAST_ID"},
    {"broadcast", "cancel", ctl_broadcast_cancel, "j", 1, 1, "BROADCAST_ID"},
    {"subscription", "add", ctl_subscription_add, "aUEc", 0, 0, "no operand"},
    {"subscription", "list", ctl_subscription_list, "aj", 0, 0, "no operand"},
    {"subscription", "delete", ctl_subscription_delete, "a", 1, 1, "SUBSCRIPTION_ID"},
};

static const struct {
    const char *group, *help;
} helps[] = {{"token", token_help},
             {"channel", channel_help},
             {"member", member_help},
             {"tree", tree_help},
             {"get", get_help},
             {"app", app_help},
             {"broadcast", broadcast_help},

             {"subscription", subscription_help}};

static const struct option long_opts[] = {
    {"app", required_argument, NULL, 'a'},
    {"scope", required_argument, NULL, 's'},
    {"label", required_argument, NULL, 'l'},
    {"expires-in", required_argument, NULL, 'e'},
    {"channel", required_argument, NULL, 'c'},
    {"hash", required_argument, NULL, 'H'},
    {"url", required_argument, NULL, 'U'},
    {"events", required_argument, NULL, 'E'},
    {"json", no_argument, NULL, 'j'},
    {"member", required_argument, NULL, 'm'},
    {"recipient", required_argument, NULL, 'r'},
    {"tag", required_argument, NULL, 't'},
    {"watch", no_argument, NULL, 'w'},
    {"redis-url", required_argument, NULL, 'u'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

static const char *group_help(const char *group)
{
    for (size_t i = 0; group != NULL && i < sizeof(helps) / sizeof(helps[0]); i++)
        if (strcmp(helps[i].group, group) == 0)
            return helps[i].help;
    return NULL;
}

static const char *long_name(int c)
{
    for (const struct option *o = long_opts; o->name != NULL; o++)
        if (o->val == c)
            return o->name;
    return "?";
}

/* The options of argv as it stands (argv[0] is skipped), into o; seen marks the letters met.
 * stop: stop at the first operand (the options before the command). 0, or CTL_USAGE after
 * printing why. Operands are left at argv[optind...]. */
static int parse(int argc, char **argv, int stop, ctl_opts_t *o, char *seen, int *help,
                 int *version)
{
    int c;

    optind = 0; /* GNU getopt: start again, argv[0] being the program's name */
    opterr = 0;
    while (
        (c = getopt_long(argc, argv,
                         stop ? "+:a:s:l:e:c:H:U:E:jm:r:t:wu:hV" : ":a:s:l:e:c:H:U:E:jm:r:t:wu:hV",
                         long_opts, NULL)) != -1) {
        const char *typed = argv[optind - 1];
        switch (c) {
        case '?':
            if (optopt != 0)
                ctl_die("unknown option -%c (see botgatectl --help)", optopt);
            else
                ctl_die("unknown option %.*s (see botgatectl --help)", (int)strcspn(typed, "="),
                        typed);
            return CTL_USAGE;
        case ':':
            ctl_die("option --%s needs a value", long_name(optopt));
            return CTL_USAGE;
        case 'a':
            o->app = optarg;
            break;
        case 's':
        case 'c':
        case 'm':
        case 'r':
        case 't': {
            json_t **list = c == 's'   ? &o->scopes
                            : c == 'c' ? &o->channels
                            : c == 'm' ? &o->members
                            : c == 'r' ? &o->recipients
                                       : &o->tags;
            if (*list == NULL)
                *list = json_array();
            json_array_append_new(*list, json_string(optarg));
            break;
        }
        case 'l':
            o->label = optarg;
            break;
        case 'e':
            o->expires = optarg;
            break;
        case 'H':
            o->hash = optarg;
            break;
        case 'U':
            o->url = optarg;
            break;
        case 'E':
            o->events = optarg;
            break;
        case 'j':
            o->json = 1;
            break;
        case 'w':
            o->watch = 1;
            break;
        case 'u':
            ctl_redis_use(optarg);
            break;
        case 'h':
            *help = 1;
            break;
        case 'V':
            *version = 1;
            break;
        }
        seen[c] = 1;
    }
    return 0;
}

static int print_help(const char *group)
{
    const char *text = group_help(group);

    if (group != NULL && text == NULL) {
        ctl_die("no command %s (see botgatectl --help)", group);
        return CTL_USAGE;
    }
    fputs(text ? text : usage_text, stdout);
    return 0;
}

/* Runs the command of the operands ops[0..n-1] (group, verb, arguments). */
static int run_operands(ctl_opts_t *o, const char *seen, char **ops, int n)
{
    const char *group = ops[0], *verb = n > 1 ? ops[1] : NULL;
    const ctl_cmd_t *cmd = NULL;
    int skip;

    if (strcmp(group, "help") == 0)
        return print_help(verb);
    if (strcmp(group, "version") == 0) {
        printf("botgatectl %s\n", BOTGATE_VERSION);
        return 0;
    }
    if (group_help(group) == NULL) {
        ctl_die("unknown command %s (see botgatectl --help)", group);
        return CTL_USAGE;
    }
    if (verb != NULL && strcmp(verb, "help") == 0)
        return print_help(group);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]) && cmd == NULL; i++)
        if (strcmp(commands[i].group, group) == 0 &&
            (commands[i].verb == NULL || (verb != NULL && strcmp(commands[i].verb, verb) == 0)))
            cmd = &commands[i];
    if (cmd == NULL) {
        if (verb == NULL)
            ctl_die("%s needs a subcommand (see botgatectl help %s)", group, group);
        else
            ctl_die("unknown command %s %s (see botgatectl help %s)", group, verb, group);
        return CTL_USAGE;
    }
    for (int c = 0; c < 256; c++)
        if (seen[c] && c != 'u' && c != 'h' && strchr(cmd->opts, c) == NULL) {
            ctl_die("--%s is not an option of %s%s%s (see botgatectl help %s)", long_name(c), group,
                    cmd->verb ? " " : "", cmd->verb ? cmd->verb : "", group);
            return CTL_USAGE;
        }
    skip = cmd->verb ? 2 : 1;
    if (n - skip < cmd->min_args || n - skip > cmd->max_args) {
        ctl_die("%s%s%s takes %s (see botgatectl help %s)", group, cmd->verb ? " " : "",
                cmd->verb ? cmd->verb : "", cmd->operands, group);
        return CTL_USAGE;
    }
    o->group = group;
    o->args = ops + skip;
    o->nargs = n - skip;
    return cmd->run(o);
}

int main(int argc, char **argv)
{
    ctl_opts_t o = {0};
    char seen[256] = {0};
    int help = 0, version = 0, rc, first;

    /* the options before the command, then the command's own: both may hold any option */
    rc = parse(argc, argv, 1, &o, seen, &help, &version);
    first = optind;
    if (rc == 0 && first < argc) {
        rc = parse(argc - first + 1, argv + first - 1, 0, &o, seen, &help, &version);
        /* argv[first - 1] stood in for the program's name: the operands follow it */
        first += optind - 1;
    }
    if (rc != 0)
        goto out;
    if (version) {
        printf("botgatectl %s\n", BOTGATE_VERSION);
    } else if (help) {
        rc = print_help(first < argc ? argv[first] : NULL);
    } else if (first >= argc) {
        fputs(usage_text, stdout);
        rc = CTL_USAGE;
    } else {
        rc = run_operands(&o, seen, argv + first, argc - first);
    }
out:
    json_decref(o.scopes);
    json_decref(o.channels);
    json_decref(o.members);
    json_decref(o.recipients);
    json_decref(o.tags);
    ctl_redis_close();
    return rc;
}
