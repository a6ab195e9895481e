/* The pod sandbox's process for the test cluster (scripts/cluster/images.sh builds it static
 * into the pause image): it holds the pod's namespaces while the pod lives, reaps the children
 * it inherits as PID 1 of a shared PID namespace, and exits on SIGINT or SIGTERM, which is
 * what the runtime sends to stop a sandbox. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig)
{
    (void)sig;
    _exit(0);
}

static void on_child(int sig)
{
    int saved = errno;

    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    errno = saved;
}

int main(void)
{
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};

    if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
        sigaction(SIGCHLD, &child, NULL) < 0)
        return 1;
    for (;;)
        pause();
}
