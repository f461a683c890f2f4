/* join_rules.c — the start of a new swarm (join.h): wait_peers as a minimum with a
 * timeout. */
#include "peer/join.h"

#include <string.h>

void join_state_init(join_state_t *j)
{
    memset(j, 0, sizeof *j);
    j->start = timeout_make("join.start", JOIN_START_S);
    j->hello = timeout_make("join.hello", JOIN_HELLO_S);
    j->settle = timeout_make("join.settle", JOIN_SETTLE_S);
    j->seen_serving = j->seen_joining = j->seen_stages = -1;
    j->settle_serving = -1;
}

int join_may_start(join_state_t *j, int serving, int joining, int stages_served, int stages,
                   double now)
{
    if (joining) { /* a member still downloading would not know whether it missed step 0 */
        timeout_stop(&j->start);
        j->seen_serving = j->seen_joining = j->seen_stages = -1;
        return 0;
    }
    if (serving >= j->wait_peers) return 1;
    if (serving != j->seen_serving || joining != j->seen_joining ||
        stages_served != j->seen_stages) { /* the table changed: wait anew */
        j->seen_serving = serving, j->seen_joining = joining, j->seen_stages = stages_served;
        timeout_start(&j->start, now);
        return 0;
    }
    return stages_served == stages && timeout_fired(&j->start, now);
}

int join_settled(join_state_t *j, int serving, double now)
{
    if (serving != j->settle_serving) {
        j->settle_serving = serving;
        timeout_start(&j->settle, now);
    }
    if (!timeout_fired(&j->settle, now)) return 0;
    j->go = 1;
    return 1;
}

int join_hello_due(join_state_t *j, double now)
{
    if (!timeout_running(&j->hello)) {
        timeout_start(&j->hello, now);
        return JOIN_HELLO_SEND;
    }
    if (!timeout_fired(&j->hello, now)) return JOIN_HELLO_WAIT;
    if (j->hello.attempts + 1 >= JOIN_HELLOS) return JOIN_HELLO_GIVE_UP;
    timeout_retry(&j->hello, now);
    return JOIN_HELLO_SEND;
}

void join_left_stage(join_state_t *j)
{
    j->go = 0;
}
