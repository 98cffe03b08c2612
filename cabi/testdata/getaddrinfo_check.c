// getaddrinfo_check: rdma_getaddrinfo as rdma-core's — a passive lookup with no node and
// no service takes its source from the hints (libfabric's verbs provider asks so), and
// rdma_create_ep bound there has the address's device.
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	struct sockaddr_in sin = {.sin_family = AF_INET};
	if (argc < 2 || inet_pton(AF_INET, argv[1], &sin.sin_addr) != 1) {
		fprintf(stderr, "usage: getaddrinfo_check IPV4\n");
		return 2;
	}
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP, .ai_family = AF_INET,
				      .ai_src_addr = (struct sockaddr *)&sin, .ai_src_len = sizeof(sin)};
	struct rdma_addrinfo *res;
	if (rdma_getaddrinfo(NULL, NULL, &hints, &res)) {
		perror("rdma_getaddrinfo");
		return 1;
	}
	char b[INET_ADDRSTRLEN] = "";
	if (res->ai_src_addr && res->ai_src_addr->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_src_addr)->sin_addr, b, sizeof(b));
	printf("source %s\n", b);
	struct rdma_cm_id *id;
	if (rdma_create_ep(&id, res, NULL, NULL)) {
		perror("rdma_create_ep");
		return 1;
	}
	printf("device %s\n", id->verbs ? ibv_get_device_name(id->verbs->device) : "(none)");
	rdma_destroy_ep(id);
	rdma_freeaddrinfo(res);
	return 0;
}
