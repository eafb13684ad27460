/* The checks of the CM C programs: CHECK(cond, printf-style why) counts a
 * failure and prints "FAIL line N: why" when cond does not hold. */
#ifndef SOFTRNIC_CM_CHECK_H
#define SOFTRNIC_CM_CHECK_H
#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			failures++;                                            \
			printf("FAIL line %d: ", __LINE__);                    \
			printf(__VA_ARGS__);                                   \
			printf("\n");                                          \
		}                                                              \
	} while (0)

#endif
