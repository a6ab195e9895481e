#!/usr/bin/env bash
# vfio.sh — read-only inventory of the GPUs bound to vfio-pci and their IOMMU groups, as acceld's
# VFIO mode reads them (docs/vfio.md): every NVIDIA PCI function's driver, IOMMU group, NUMA
# node and driver_override; each group's members (class, driver: a non-bridge device beside a GPU
# would make acceld refuse that group); /dev/vfio/vfio and /dev/vfio/<group> for every group with
# a function bound to vfio-pci. Changes nothing. Exit 77 when no NVIDIA device is bound to vfio-pci
# (the inventory is still printed), 1 when a check fails.
#
#   tests/gpu/vfio.sh
# SYSFS_ROOT and DEV_ROOT (default /sys, /dev) point it at another tree: the emulator's
# (<state>.d/sysfs, <state>.d/dev; meson test emu-vfio-script runs it there).
# With acceld built (ACCELD, default build/src/acceld/acceld), it then runs acceld --mode vfio
# --no-register over the same trees for a moment (a temporary plugin and state dir: it binds
# nothing, registers nothing) and checks that it serves exactly the bound GPUs alone in their
# group and refuses the others with a message.
set -uo pipefail
sys=${SYSFS_ROOT:-/sys}
dev=${DEV_ROOT:-/dev}
failed=0 bound=0 alone=0 shared=""
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=1; }
link() { [ -L "$1" ] && basename "$(readlink "$1")" || echo "-"; }

groups_dir=$sys/kernel/iommu_groups
if [ -z "$(ls -A "$groups_dir" 2>/dev/null)" ]; then
    echo "record: no IOMMU groups under $groups_dir: the IOMMU is off (VFIO cannot be used here)"
fi
[ -e "$dev/vfio/vfio" ] && echo "record: $dev/vfio/vfio present" \
    || echo "record: no $dev/vfio/vfio (the vfio module is not loaded)"

for d in "$sys"/bus/pci/devices/*; do
    [ -e "$d/vendor" ] || continue
    [ "$(cat "$d/vendor")" = "0x10de" ] || continue
    bdf=$(basename "$d")
    drv=$(link "$d/driver")
    group=$(link "$d/iommu_group")
    echo "record: $bdf class $(cat "$d/class") device $(cat "$d/device") driver $drv" \
         "group $group numa $(cat "$d/numa_node" 2>/dev/null || echo -)" \
         "override $(cat "$d/driver_override" 2>/dev/null || echo -)"
    [ "$drv" = "vfio-pci" ] || continue
    bound=$((bound + 1))
    if [ "$group" = "-" ]; then
        fail "$bdf is bound to vfio-pci without an IOMMU group"
        continue
    fi
    [ -e "$dev/vfio/$group" ] && pass "$bdf: $dev/vfio/$group exists" \
        || fail "$bdf: bound to vfio-pci but $dev/vfio/$group is missing"
    [ -e "$dev/vfio/vfio" ] && pass "$bdf: $dev/vfio/vfio exists" \
        || fail "$bdf: bound to vfio-pci but $dev/vfio/vfio is missing"
    members=0 others=0
    for m in "$groups_dir/$group/devices"/*; do
        [ -e "$m" ] || continue
        members=$((members + 1))
        mb=$(basename "$m")
        cls=$(cat "$m/class")
        echo "record:   group $group member $mb class $cls driver $(link "$m/driver")"
        case $cls in
            0x0604*) ;;                      # a bridge: fine in the group
            *) [ "$mb" = "$bdf" ] || others=$((others + 1)) ;;
        esac
    done
    [ $members -ge 1 ] && pass "$bdf: group $group lists $members device(s), itself among them" \
        || fail "$bdf: group $group has no devices/ entries"
    echo "record: $bdf: group $group holds $others other non-bridge device(s)" \
         "(acceld refuses such a group)"
    if [ $others = 0 ]; then alone=$((alone + 1)); else shared="$shared $bdf"; fi
    # the sysfs ABI: the driver's directory lists the device, and the group link resolves
    [ -e "$sys/bus/pci/drivers/vfio-pci/$bdf" ] && pass "$bdf listed under drivers/vfio-pci" \
        || fail "$bdf not under $sys/bus/pci/drivers/vfio-pci"
done
# NVML's view beside sysfs: the emulator assumes NVML lists no GPU bound to vfio-pci (a record,
# not a check, until a GPU run confirms it: docs/gpu-validation.md)
if [ "$sys" = /sys ] && command -v nvidia-smi >/dev/null 2>&1; then
    echo "record: nvidia-smi -L lists $(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') GPU(s);" \
         "$bound NVIDIA function(s) are bound to vfio-pci"
fi
if [ $bound = 0 ]; then
    echo "SKIP no NVIDIA device is bound to vfio-pci here (read-only: nothing was bound)"
    exit 77
fi
acceld=${ACCELD:-$(cd "$(dirname "$0")/../.." && pwd)/build/src/acceld/acceld}
if [ -x "$acceld" ]; then
    tmp=$(mktemp -d)
    mkdir "$tmp/dp"
    timeout -s TERM 3 "$acceld" --mode vfio --no-register --device-plugin-dir "$tmp/dp" \
        --sysfs-root "$sys" --dev-root "$dev" --state-dir "$tmp/state" >"$tmp/log" 2>&1
    sed 's/^/record: acceld: /' "$tmp/log"
    served=$(sed -n 's/.*VFIO mode: \([0-9]*\) GPU(s) as .*/\1/p' "$tmp/log" |
             awk '{n += $1} END {print n + 0}')
    [ "$served" = "$alone" ] && pass "acceld serves the $alone GPU(s) alone in their group" \
        || fail "acceld serves $served GPU(s), $alone are bound and alone in their group"
    for b in $shared; do
        grep -q "GPU $b is not served: its IOMMU group" "$tmp/log" \
            && pass "acceld refuses $b (its group holds another device), saying so" \
            || fail "acceld does not say why $b is refused"
    done
    rm -rf "$tmp"
else
    echo "record: no acceld at $acceld: its VFIO mode not run"
fi
exit $failed
