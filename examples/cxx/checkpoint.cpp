// A C++ application using scr-rs through scr.h (which declares its functions extern "C"
// for C++): a per-rank std::vector state, checkpointed when SCR_Need_checkpoint says so,
// one file per rank written with std::ofstream, restarted from the newest checkpoint.
//
// Build: mpicxx -o checkpoint checkpoint.cpp $(pkg-config --cflags --libs scr)
// Run:   mpiexec -n 4 ./checkpoint [--steps N] [--kill-at S] [--kill-rank R]
// Prints "restarted from NAME at step S" or "starting fresh", and on rank 0
// "final step N state sum X" (the same in an uninterrupted run).
#include <mpi.h>
#include <scr.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

namespace {

// Routes `name` through SCR; empty when SCR refuses it.
std::string route(const std::string& name)
{
    char path[SCR_MAX_FILENAME];
    if (SCR_Route_file(name.c_str(), path) != SCR_SUCCESS) {
        return {};
    }
    return path;
}

}  // namespace

int main(int argc, char** argv)
{
    long steps = 20, kill_at = -1;
    int kill_rank = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string opt = argv[i];
        if (opt == "--steps") steps = std::atol(argv[i + 1]);
        else if (opt == "--kill-at") kill_at = std::atol(argv[i + 1]);
        else if (opt == "--kill-rank") kill_rank = std::atoi(argv[i + 1]);
        else {
            std::cerr << "unknown option " << opt << "\n";
            return 2;
        }
    }
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (SCR_Init() != SCR_SUCCESS) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) std::cout << "ranks " << size << std::endl;

    std::vector<std::uint64_t> state(128);
    std::iota(state.begin(), state.end(), static_cast<std::uint64_t>(rank) * 1000);
    long step = 0;

    int have = 0;
    char name[SCR_MAX_FILENAME];
    while (SCR_Have_restart(&have, name) == SCR_SUCCESS && have) {
        SCR_Start_restart(name);
        std::ifstream in(route("state/rank_" + std::to_string(rank) + ".bin"), std::ios::binary);
        long s = 0;
        in.read(reinterpret_cast<char*>(&s), sizeof(s));
        in.read(reinterpret_cast<char*>(state.data()), static_cast<std::streamsize>(state.size() * sizeof(state[0])));
        if (SCR_Complete_restart(in.good() ? 1 : 0) == SCR_SUCCESS) {
            step = s;
            if (rank == 0) std::cout << "restarted from " << name << " at step " << step << std::endl;
            break;
        }
    }
    if (step == 0 && rank == 0) std::cout << "starting fresh" << std::endl;

    while (step < steps) {
        ++step;
        for (std::size_t i = 0; i < state.size(); ++i) {
            state[i] = state[i] * 6364136223846793005ULL + static_cast<std::uint64_t>(step + rank);
        }
        int need = 0;
        SCR_Need_checkpoint(&need);
        if (need) {
            std::string ckpt = "ckpt." + std::to_string(step);
            SCR_Start_output(ckpt.c_str(), SCR_FLAG_CHECKPOINT);
            std::ofstream out(route("state/rank_" + std::to_string(rank) + ".bin"), std::ios::binary);
            out.write(reinterpret_cast<const char*>(&step), sizeof(step));
            out.write(reinterpret_cast<const char*>(state.data()), static_cast<std::streamsize>(state.size() * sizeof(state[0])));
            out.close();
            if (SCR_Complete_output(out.good() ? 1 : 0) == SCR_SUCCESS && rank == 0) {
                std::cout << "checkpoint " << ckpt << std::endl;
            }
        }
        if (step == kill_at && rank == kill_rank) {
            std::cout << "rank " << rank << " killed after step " << step << std::endl;
            std::raise(SIGKILL);
        }
    }

    std::uint64_t mine = std::accumulate(state.begin(), state.end(), std::uint64_t{0});
    std::uint64_t total = 0;
    MPI_Reduce(&mine, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) std::cout << "final step " << step << " state sum " << total << std::endl;
    SCR_Finalize();
    MPI_Finalize();
    return 0;
}
