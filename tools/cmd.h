/* cmd.h — the subcommands of the swarmtrain binary. Each takes main's argc/argv with
 * argv[0] set to the subcommand's name and returns the process exit status.
 * Not for: library code; everything here may print and decide exit codes. */
#ifndef SWARMTRAIN_CMD_H
#define SWARMTRAIN_CMD_H

int cmd_train(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_peer(int argc, char **argv);
int cmd_local(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_keygen(int argc, char **argv);

/* bench topics, dispatched by cmd_bench: `swarmtrain bench model|codecs|store|swarm|demo|swap|learn` */
int bench_model(int argc, char **argv);
int bench_codecs(int argc, char **argv);
int bench_store(int argc, char **argv);
int bench_swarm(int argc, char **argv);
int bench_demo(int argc, char **argv);
int bench_swap(int argc, char **argv);
int bench_learn(int argc, char **argv);

#endif
