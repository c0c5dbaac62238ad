// A busy neighbour for the CPU benchmarks: one process per core that does nothing but
// spin, as another user's job on a shared machine would (the same as running
// `yes > /dev/null` once per core). Our programs then compete for every core, and a
// thread that waits for another at a barrier can lose its core to the neighbour for a
// whole time slice: the benchmarks time steps with and without one.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NEIGHBOURS 64
static pid_t neighbours[MAX_NEIGHBOURS];
static int num_neighbours = 0;

static void busy_neighbour_stop(void);

// Starts one spinning child process per online core (stopped at exit at the latest).
static void busy_neighbour_start(void) {
    static int registered = 0;
    if (!registered) { atexit(busy_neighbour_stop); registered = 1; }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) { cores = 1; }
    if (cores > MAX_NEIGHBOURS) { cores = MAX_NEIGHBOURS; }
    for (num_neighbours = 0; num_neighbours < cores; num_neighbours++) {
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); exit(EXIT_FAILURE); }
        if (pid == 0) { // the child spins until it is killed, or until we die in any way (Linux's PDEATHSIG)
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() == 1) { _exit(0); } // we died before prctl
            for (volatile unsigned long i = 0;; i++) {}
        }
        neighbours[num_neighbours] = pid;
    }
    struct timespec settle = {0, 100000000};
    nanosleep(&settle, NULL); // 0.1 s: let the scheduler see them running before we time anything
}

static void busy_neighbour_stop(void) {
    for (int i = 0; i < num_neighbours; i++) {
        kill(neighbours[i], SIGKILL);
        waitpid(neighbours[i], NULL, 0);
    }
    num_neighbours = 0;
}

// The OpenMP wait policy in effect (the programs' set_omp_wait_policy sets GOMP_SPINCOUNT
// unless the user set one of these), for the benchmarks' headers.
static const char *wait_policy_in_effect(void) {
    static char text[128];
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    snprintf(text, sizeof(text), "OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s", policy ? policy : "(unset)", spin ? spin : "(unset)");
    return text;
}
