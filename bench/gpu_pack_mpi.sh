#!/usr/bin/env bash
# Packs this machine's Open MPI (mpirun, orted, the shared-memory and TCP components, PMIx, the help
# texts and every library they need beyond a base system) into DEST/mpi, relocatable through
# OPAL_PREFIX, so that a lent GPU machine, which has no MPI, can start several gtrain ranks: source
# DEST/mpi/env.sh there. Components for fabrics a single machine does not use (UCX, libfabric,
# verbs, PSM, OpenSHMEM) stay behind: they would double the pack, and Open MPI runs without them.
#
# Usage: bench/gpu_pack_mpi.sh DEST      (gpu_pack_build.sh calls it; DEST/lib gets the libraries)
#        bench/gpu_pack_mpi.sh --check DEST [CMD...]   in a mount namespace that hides this machine's
#          Open MPI, PMIx and ssh (as root): starts 2 ranks with the pack alone, then runs CMD there
set -euo pipefail
check=0
[[ ${1:-} == --check ]] && { check=1; shift; }
DEST=${1:?usage: gpu_pack_mpi.sh [--check] DEST}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
MPI=$DEST/mpi
ARCH=x86_64-linux-gnu
SYS_MPI=/usr/lib/$ARCH/openmpi
SYS_PMIX=/usr/lib/$ARCH/pmix2

if ((check)); then
  [[ -f $MPI/env.sh ]] || { echo "gpu_pack_mpi.sh: $MPI/env.sh is missing (pack first)" >&2; exit 2; }
  # Hide what a bare machine lacks (Open MPI's and PMIx's folders, configuration and programs, and
  # ssh: no remote shell there), then start two ranks from the pack alone, then CMD if given.
  hide_dirs="$SYS_MPI $SYS_PMIX /usr/share/openmpi /usr/share/pmix /etc/openmpi"
  hide_files="/usr/bin/orterun /usr/bin/orted /usr/bin/ssh /usr/bin/rsh"
  exec unshare -m --propagation private bash -euo pipefail -c '
    for d in '"$hide_dirs"'; do [[ -d $d ]] && mount -t tmpfs tmpfs "$d"; done
    for f in '"$hide_files"'; do [[ -e $f ]] && mount --bind /dev/null "$(readlink -f "$f")"; done
    source "$0"
    echo "mpirun: $(command -v mpirun)"
    mpirun -np 2 --oversubscribe bash -c "echo rank \$OMPI_COMM_WORLD_RANK of \$OMPI_COMM_WORLD_SIZE"
    if (($#)); then "$@"; fi
  ' "$MPI/env.sh" "${@:2}"
fi

[[ -d $SYS_MPI/lib/openmpi3 ]] || { echo "gpu_pack_mpi.sh: no Open MPI under $SYS_MPI (apt-get install libopenmpi-dev openmpi-bin)" >&2; exit 2; }
rm -rf "$MPI"
mkdir -p "$MPI/bin" "$MPI/lib/$ARCH/openmpi/lib/openmpi3" "$MPI/lib/$ARCH/pmix2/lib/pmix" "$MPI/share" "$MPI/etc" "$DEST/lib"
cp -L /usr/bin/orterun "$MPI/bin/orterun"
cp -L /usr/bin/orted "$MPI/bin/orted"
ln -sf orterun "$MPI/bin/mpirun"
ln -sf orterun "$MPI/bin/mpiexec"
# Components: those whose libraries are all here after the skip list (fabrics, OpenSHMEM).
skip='libuc[pst]|libucm|libfabric|libibverbs|librdmacm|libpsm|libinfinipath|libefa|libnl-|liboshmem|libmca_common_(ucx|ofi|verbs)'
kept=0 left=()
for so in "$SYS_MPI"/lib/openmpi3/*.so; do
  if ldd "$so" | grep -Eq "^\s*($skip)"; then left+=("$(basename "$so" .so)"); continue; fi
  cp "$so" "$MPI/lib/$ARCH/openmpi/lib/openmpi3/"
  kept=$((kept + 1))
done
cp "$SYS_PMIX"/lib/pmix/*.so "$MPI/lib/$ARCH/pmix2/lib/pmix/"
cp -r /usr/share/openmpi "$MPI/share/openmpi"
[[ -d /usr/share/pmix ]] && cp -r /usr/share/pmix "$MPI/share/pmix"
[[ -d $SYS_PMIX/share ]] && cp -r "$SYS_PMIX/share" "$MPI/lib/$ARCH/pmix2/share"
cp /etc/openmpi/openmpi-mca-params.conf "$MPI/etc/"
# Every library the programs and kept components load, but the C runtime's (present everywhere).
base='^(libc|libm|libdl|librt|libpthread|libutil|libgcc_s|ld-linux-x86-64|linux-vdso)\.so'
for bin in "$MPI"/bin/orterun "$MPI"/bin/orted "$MPI"/lib/$ARCH/openmpi/lib/openmpi3/*.so \
           "$MPI"/lib/$ARCH/pmix2/lib/pmix/*.so "$SYS_MPI"/lib/libmpi.so; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $base ]] && continue
    [[ -f $DEST/lib/$name ]] || cp -L "$path" "$DEST/lib/$name"
  done
done
cat >"$MPI/env.sh" <<'ENV'
# Source this to use the packed Open MPI (bench/gpu_pack_mpi.sh): a single machine, run as root.
_pack_mpi=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX=$_pack_mpi PMIX_PREFIX=$_pack_mpi/lib/x86_64-linux-gnu/pmix2
# Debian configures PMIx's data and component folders by full path: name them too.
export PMIX_DATADIR=$PMIX_PREFIX/share PMIX_PKGDATADIR=$PMIX_PREFIX/share/pmix
export PMIX_MCA_mca_base_component_path=$PMIX_PREFIX/lib/pmix
export PATH=$_pack_mpi/bin${PATH:+:$PATH}
export LD_LIBRARY_PATH=$(cd "$_pack_mpi/../lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_MCA_mca_base_param_files=$_pack_mpi/etc/openmpi-mca-params.conf
# One machine: no remote shell, shared memory between ranks, no fabric components (left behind).
export OMPI_MCA_plm=isolated OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx,rdma
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset _pack_mpi
ENV
echo "gpu_pack_mpi.sh: Open MPI $(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v//p' | head -1) packed in $MPI:" \
  "$kept components (${#left[@]} left behind: ${left[*]})"
