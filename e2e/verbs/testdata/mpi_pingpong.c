// mpi_pingpong: rank 0 sends each message size to rank 1, which adds 1 to every byte
// and sends it back; rank 0 counts the bytes that came back wrong. Then an allreduce.
// TestE2EMPI runs it under mpirun over UCX over pibgw's libibverbs.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	static const int sizes[] = {8, 4096, 65536, 1 << 20};
	for (int s = 0; s < 4; s++) {
		int n = sizes[s], iters = n > 65536 ? 50 : 500;
		unsigned char *buf = malloc(n);
		long bad = 0;
		double t0 = MPI_Wtime();
		for (int i = 0; i < iters; i++) {
			if (rank == 0) {
				for (int k = 0; k < n; k++)
					buf[k] = (unsigned char)(i + k);
				MPI_Send(buf, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
				MPI_Recv(buf, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int k = 0; k < n; k++)
					bad += buf[k] != (unsigned char)(i + k + 1);
			} else if (rank == 1) {
				MPI_Recv(buf, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int k = 0; k < n; k++)
					buf[k]++;
				MPI_Send(buf, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
			}
		}
		double t = MPI_Wtime() - t0;
		if (rank == 0)
			printf("size %d: %.1f us round trip, %.1f MB/s, %ld bad bytes\n", n, t / iters * 1e6,
			       2.0 * n * iters / t / 1e6, bad);
		free(buf);
	}
	double x = rank + 1, sum = 0;
	MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("allreduce %g of %d ranks\n", sum, size);
	MPI_Finalize();
	return 0;
}
