/* next-target.c — the definition that comes after next-probe.c's in the
 * search order: what dlsym(RTLD_NEXT) from the probe must find. */
int vc_next_target(void);
int vc_next_target_id(void);

int vc_next_target(void)
{
    return 2;
}

int vc_next_target_id(void)
{
    return 2;
}
